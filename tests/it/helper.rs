//! helper tests.
