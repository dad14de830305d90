//! cases tests.
