//! The JSON flags' input (`--context`, `--state`, `--data`, …): inline
//! text, `@PATH` or `@-` for stdin, read whole up to a cap, then parsed by
//! the library's validator.

use logbook::validate::json_object;
use logbook::{Error, Result};
use std::io::Read;

/// Largest file or stdin read for a JSON flag: 16 MiB (the JSON caps are
/// checked on the compact form afterwards).
const JSON_FILE_MAX: u64 = 16 * 1024 * 1024;

/// Reads a JSON flag: inline text, `@PATH`, or `@-` for stdin.
pub(super) fn json_flag(field: &str, value: Option<&str>) -> Result<Option<serde_json::Value>> {
    json_flag_text(field, value)?
        .map(|text| json_object(field, &text))
        .transpose()
}

/// The text of a JSON flag (inline, `@PATH`, or `@-`), unparsed; at most
/// 16 MiB.
pub(super) fn json_flag_text(field: &str, value: Option<&str>) -> Result<Option<String>> {
    let Some(v) = value else { return Ok(None) };
    let text = match v.strip_prefix('@') {
        None => v.to_owned(),
        Some(src) => {
            let mut buf = String::new();
            let res = if src == "-" {
                std::io::stdin()
                    .lock()
                    .take(JSON_FILE_MAX + 1)
                    .read_to_string(&mut buf)
            } else {
                std::fs::File::open(src)
                    .and_then(|f| f.take(JSON_FILE_MAX + 1).read_to_string(&mut buf))
            };
            res.map_err(|e| {
                let why = match e.kind() {
                    std::io::ErrorKind::NotFound => "no such file".to_owned(),
                    std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
                    std::io::ErrorKind::IsADirectory => "it is a directory".to_owned(),
                    std::io::ErrorKind::InvalidData => "it is not UTF-8 text".to_owned(),
                    k => k.to_string(),
                };
                let what = if src == "-" {
                    "stdin".to_owned()
                } else {
                    // A path typed by the user; redacted like every echo.
                    format!("the file `{}`", logbook::redact::redact(src))
                };
                Error::invalid(field, format!("cannot read {what}: {why}"))
            })?;
            if buf.len() as u64 > JSON_FILE_MAX {
                return Err(Error::invalid(field, "the input is larger than 16 MiB"));
            }
            buf
        }
    };
    Ok(Some(text))
}
