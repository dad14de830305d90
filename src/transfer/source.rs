//! Streaming readers over import inputs: one session at a time, so memory
//! stays flat whatever the input's size. Also the private-file writer the
//! exports use (folders 0700, files 0600, written whole then renamed).

use super::json::{read_line_capped, Line, Obj};
use super::{amber, jsonl, phelix, Bad, ImportFormat, MAX_SESSION_INPUT_BYTES};
use crate::error::{Error, Result};
use crate::model::ActorType;
use crate::store::rows::SessionRows;
use crate::store::DbFiles;
use std::fs::{self, File, ReadDir};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where an item can be read again (a child met before its parent is
/// retried after the rest of the input).
#[derive(Debug, Clone)]
pub(crate) enum Loc {
    /// A JSON Lines file: byte offset and 1-based line.
    Offset(u64, u64),
    /// A file or folder holding one session.
    Path(PathBuf),
    /// A stdin line kept in the spill file: byte offset and 1-based line.
    Spilled(u64, u64),
    /// Not read again.
    Once,
}

/// One session's input, parsed or refused.
pub(crate) struct Item {
    pub file: String,
    pub line: Option<u64>,
    pub session_id: Option<String>,
    pub rows: std::result::Result<SessionRows, Bad>,
    pub loc: Loc,
    /// The raw line of a stdin session that names a parent (it may have to
    /// wait for its parent: see [`Source::spill`]).
    pub raw: Option<Vec<u8>>,
    /// A purge record's line (logbook JSON Lines only): the item carries
    /// it instead of a session, and `rows` is unused.
    pub purge: Option<jsonl::PurgeLine>,
}

/// A stream of sessions.
pub(crate) trait Source {
    /// The next session, or `None` at the end. Errors are fatal (the input
    /// as a whole cannot be read).
    fn next_item(&mut self) -> Result<Option<Item>>;
    /// Reads the item at `loc` again.
    fn reload(&mut self, loc: &Loc) -> Result<Option<Item>>;
    /// Keeps the raw input of an item that cannot be read again, so it can
    /// be reloaded later; returns where.
    fn spill(&mut self, _raw: &[u8], _line: u64) -> Result<Loc> {
        Ok(Loc::Once)
    }
}

/// An unlinked temp file (created 0600, removed from its folder at once) that
/// holds stdin lines waiting for their parent session.
struct Spill {
    file: File,
    len: u64,
}

impl Spill {
    fn create() -> Result<Self> {
        let dir = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = dir.join(format!("logbook-import-{}-{nanos}", std::process::id()));
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| io_err(format!("cannot create {}", path.display()), e))?;
        // Unlinked: the lines (raw input) are reachable only through this
        // handle, and vanish with the process.
        let _ = fs::remove_file(&path);
        Ok(Spill { file, len: 0 })
    }
}

fn io_err(context: String, source: io::Error) -> Error {
    Error::Io { context, source }
}

/// JSON Lines from a file (re-readable) or any reader (stdin).
pub(crate) struct JsonlSource {
    reader: Box<dyn BufRead>,
    path: Option<PathBuf>,
    label: String,
    offset: u64,
    line: u64,
    buf: Vec<u8>,
    spill: Option<Spill>,
}

impl JsonlSource {
    /// Opens a JSON Lines file.
    pub fn open(path: &Path) -> Result<Self> {
        let f =
            File::open(path).map_err(|e| io_err(format!("cannot open {}", path.display()), e))?;
        Ok(JsonlSource {
            reader: Box::new(BufReader::with_capacity(256 * 1024, f)),
            path: Some(path.to_path_buf()),
            label: path.display().to_string(),
            offset: 0,
            line: 0,
            buf: Vec::new(),
            spill: None,
        })
    }

    /// Reads JSON Lines from a stream (not re-readable).
    pub fn from_reader(r: Box<dyn BufRead>, label: &str) -> Self {
        JsonlSource {
            reader: r,
            path: None,
            label: label.to_owned(),
            offset: 0,
            line: 0,
            buf: Vec::new(),
            spill: None,
        }
    }

    fn item_from_buf(&self, line: u64, loc: Loc, too_long: bool) -> Item {
        let mk = |session_id, rows| Item {
            file: self.label.clone(),
            line: Some(line),
            session_id,
            rows,
            loc: loc.clone(),
            raw: None,
            purge: None,
        };
        if too_long {
            let reason = format!("is longer than the limit of {MAX_SESSION_INPUT_BYTES} bytes");
            return mk(None, Err(Bad::new("line", reason)));
        }
        let Ok(text) = std::str::from_utf8(&self.buf) else {
            return mk(None, Err(Bad::new("line", "is not UTF-8")));
        };
        match Obj::parse(text, "") {
            Err(b) => mk(
                None,
                Err(Bad {
                    field: "line".into(),
                    ..b
                }),
            ),
            Ok(o) if jsonl::is_purge_line(&o) => match jsonl::parse_purge(&o) {
                Ok(p) => {
                    let mut item = mk(None, Err(Bad::new("line", "is a purge record")));
                    item.purge = Some(p);
                    item
                }
                Err(b) => mk(None, Err(b)),
            },
            Ok(o) => {
                let mut item = mk(jsonl::peek_id(&o), jsonl::parse(&o));
                let child = matches!(&item.rows, Ok(r) if r.parent_session_id.is_some());
                if child && matches!(loc, Loc::Once) {
                    item.raw = Some(self.buf.clone());
                }
                item
            }
        }
    }
}

impl Source for JsonlSource {
    fn next_item(&mut self) -> Result<Option<Item>> {
        loop {
            let start = self.offset;
            let got = read_line_capped(&mut self.reader, &mut self.buf, MAX_SESSION_INPUT_BYTES)
                .map_err(|e| io_err(format!("cannot read {}", self.label), e))?;
            let (n, too_long) = match got {
                Line::Eof => return Ok(None),
                Line::Text(n) => (n, false),
                Line::TooLong(n) => (n, true),
            };
            self.offset += n;
            self.line += 1;
            strip_bom(&mut self.buf, self.line);
            if !too_long && self.buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let loc = match self.path {
                Some(_) => Loc::Offset(start, self.line),
                None => Loc::Once,
            };
            return Ok(Some(self.item_from_buf(self.line, loc, too_long)));
        }
    }

    fn reload(&mut self, loc: &Loc) -> Result<Option<Item>> {
        let mut f = match (loc, &self.path, &self.spill) {
            (Loc::Offset(..), Some(path), _) => File::open(path)
                .map_err(|e| io_err(format!("cannot open {}", path.display()), e))?,
            (Loc::Spilled(..), _, Some(sp)) => sp
                .file
                .try_clone()
                .map_err(|e| io_err("cannot read the spill file".to_owned(), e))?,
            _ => return Ok(None),
        };
        let (Loc::Offset(off, line) | Loc::Spilled(off, line)) = loc else {
            return Ok(None);
        };
        let ctx = || format!("cannot read {}", self.label);
        f.seek(SeekFrom::Start(*off))
            .map_err(|e| io_err(ctx(), e))?;
        let mut r = BufReader::new(f);
        let got = read_line_capped(&mut r, &mut self.buf, MAX_SESSION_INPUT_BYTES)
            .map_err(|e| io_err(ctx(), e))?;
        strip_bom(&mut self.buf, *line);
        let item = match got {
            Line::Eof => None,
            Line::Text(_) => Some(self.item_from_buf(*line, loc.clone(), false)),
            Line::TooLong(_) => Some(self.item_from_buf(*line, loc.clone(), true)),
        };
        Ok(item)
    }

    fn spill(&mut self, raw: &[u8], line: u64) -> Result<Loc> {
        if self.spill.is_none() {
            self.spill = Some(Spill::create()?);
        }
        let Some(sp) = self.spill.as_mut() else {
            return Ok(Loc::Once);
        };
        let at = sp.len;
        let err = |e| io_err("cannot write the spill file".to_owned(), e);
        sp.file.seek(SeekFrom::Start(at)).map_err(err)?;
        sp.file.write_all(raw).map_err(err)?;
        sp.file.write_all(b"\n").map_err(err)?;
        sp.len += raw.len() as u64 + 1;
        Ok(Loc::Spilled(at, line))
    }
}

/// Phelix files or Amber session folders, in directory order.
pub(crate) struct DirSource {
    format: ImportFormat,
    entries: ReadDir,
    dir: PathBuf,
    actor: ActorType,
}

/// The folder that holds the sessions: `SRC/sessions` (Phelix),
/// `SRC/.amber/sessions` or `SRC/sessions` (Amber), else SRC itself.
fn sessions_dir(format: ImportFormat, src: &Path) -> PathBuf {
    let candidates: &[&str] = match format {
        ImportFormat::Amber => &[".amber/sessions", "sessions"],
        _ => &["sessions"],
    };
    candidates
        .iter()
        .map(|c| src.join(c))
        .find(|p| p.is_dir())
        .unwrap_or_else(|| src.to_path_buf())
}

impl DirSource {
    /// Opens the sessions folder of a Phelix or Amber input.
    pub fn open(format: ImportFormat, src: &Path, actor: ActorType) -> Result<Self> {
        if !src.is_dir() {
            return Err(Error::invalid(
                "SRC",
                format!("must be a folder for --format {}", format.as_str()),
            ));
        }
        let dir = sessions_dir(format, src);
        let entries =
            fs::read_dir(&dir).map_err(|e| io_err(format!("cannot list {}", dir.display()), e))?;
        Ok(DirSource {
            format,
            entries,
            dir,
            actor,
        })
    }

    fn read(&self, path: &Path) -> Item {
        let file = path.display().to_string();
        let loc = Loc::Path(path.to_path_buf());
        match self.format {
            ImportFormat::Amber => {
                let (session_id, rows) = amber::read_session(path, self.actor);
                let (file, line) = match &rows {
                    Err(Bad {
                        file: Some(f),
                        line,
                        ..
                    }) => (path.join(f).display().to_string(), *line),
                    _ => (file, None),
                };
                Item {
                    file,
                    line,
                    session_id,
                    rows,
                    loc,
                    raw: None,
                    purge: None,
                }
            }
            _ => {
                let (session_id, rows) = read_phelix(path);
                Item {
                    file,
                    line: None,
                    session_id,
                    rows,
                    loc,
                    raw: None,
                    purge: None,
                }
            }
        }
    }
}

fn read_phelix(path: &Path) -> (Option<String>, std::result::Result<SessionRows, Bad>) {
    let f = match open_regular(path) {
        Ok(f) => f,
        Err(reason) => return (None, Err(Bad::new("file", reason))),
    };
    let cap = u64::try_from(MAX_SESSION_INPUT_BYTES).unwrap_or(u64::MAX);
    let mut text = String::new();
    match f.take(cap + 1).read_to_string(&mut text) {
        Ok(n) if n > MAX_SESSION_INPUT_BYTES => {
            let reason = format!("is larger than the limit of {MAX_SESSION_INPUT_BYTES} bytes");
            return (None, Err(Bad::new("file", reason)));
        }
        Ok(_) => {}
        Err(_) => return (None, Err(Bad::new("file", "is unreadable or not UTF-8"))),
    }
    match Obj::parse(&text, "") {
        Err(b) => (
            None,
            Err(Bad {
                field: "file".into(),
                ..b
            }),
        ),
        Ok(o) => {
            let id = phelix::peek_id(&o);
            let stem = path.file_stem().and_then(|s| s.to_str());
            if id.is_some() && id.as_deref() != stem {
                let b = Bad::new(
                    "session_id",
                    "does not match its file name (<session_id>.json)",
                );
                return (id, Err(b));
            }
            (id, phelix::parse(&o))
        }
    }
}

impl Source for DirSource {
    fn next_item(&mut self) -> Result<Option<Item>> {
        loop {
            let Some(entry) = self.entries.next() else {
                return Ok(None);
            };
            let entry =
                entry.map_err(|e| io_err(format!("cannot list {}", self.dir.display()), e))?;
            let path = entry.path();
            let wanted = match self.format {
                ImportFormat::Amber => path.is_dir(),
                _ => path.is_file() && path.extension().is_some_and(|x| x == "json"),
            };
            if wanted {
                return Ok(Some(self.read(&path)));
            }
        }
    }

    fn reload(&mut self, loc: &Loc) -> Result<Option<Item>> {
        Ok(match loc {
            Loc::Path(p) => Some(self.read(p)),
            _ => None,
        })
    }
}

/// Creates missing folders of `dir` with mode 0700 (existing ones are left
/// as they are).
/// Opens one input file of an import, refusing anything but a regular file:
/// a FIFO would block and a device such as `/dev/zero` never ends. The open
/// is non-blocking, so a FIFO cannot stall the open itself (reads of a
/// regular file are unaffected). `Err` is the reason a rejection gives.
pub(crate) fn open_regular(path: &Path) -> std::result::Result<File, &'static str> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(|_| "is missing or unreadable")?;
    match f.metadata() {
        Ok(m) if m.is_file() => Ok(f),
        Ok(_) => Err("is not a regular file"),
        Err(_) => Err("is missing or unreadable"),
    }
}

pub(crate) fn create_private_dirs(dir: &Path) -> Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_private_dirs(parent)?;
    }
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| io_err(format!("cannot set the mode of {}", dir.display()), e)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(io_err(format!("cannot create folder {}", dir.display()), e)),
    }
}

/// A file being written privately: a 0600 temp file beside its target,
/// renamed over it by [`PrivateFile::finish`]; removed if dropped unfinished.
pub(crate) struct PrivateFile {
    tmp: PathBuf,
    target: PathBuf,
    out: io::BufWriter<File>,
    done: bool,
}

impl PrivateFile {
    /// Starts writing `target` (its missing parent folders created 0700),
    /// after checking that it is none of the database's files (`guard`;
    /// INVALID_ARGUMENT naming `field` otherwise, with nothing created).
    pub fn create(target: &Path, guard: &DbFiles, field: &str) -> Result<Self> {
        guard.refuse(target, field)?;
        if let Some(parent) = target.parent() {
            create_private_dirs(parent)?;
        }
        let mut name = target.file_name().unwrap_or_default().to_os_string();
        name.push(format!(".tmp-{}", std::process::id()));
        let tmp = target.with_file_name(name);
        let f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| io_err(format!("cannot create {}", tmp.display()), e))?;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600))
            .map_err(|e| io_err(format!("cannot set the mode of {}", tmp.display()), e))?;
        Ok(PrivateFile {
            tmp,
            target: target.to_path_buf(),
            out: io::BufWriter::with_capacity(256 * 1024, f),
            done: false,
        })
    }

    /// The writer.
    pub fn writer(&mut self) -> &mut dyn Write {
        &mut self.out
    }

    /// Flushes, syncs and renames the file into place (mode 0600).
    pub fn finish(&mut self) -> Result<()> {
        let ctx = |what: &str, p: &Path| format!("cannot {what} {}", p.display());
        self.out
            .flush()
            .map_err(|e| io_err(ctx("write", &self.tmp), e))?;
        self.out
            .get_ref()
            .sync_all()
            .map_err(|e| io_err(ctx("write", &self.tmp), e))?;
        fs::rename(&self.tmp, &self.target).map_err(|e| io_err(ctx("write", &self.target), e))?;
        self.done = true;
        fs::set_permissions(&self.target, fs::Permissions::from_mode(0o600))
            .map_err(|e| io_err(ctx("set the mode of", &self.target), e))
    }
}

impl Drop for PrivateFile {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Drops a UTF-8 byte order mark at the start of the input's first line
/// (editors on some systems write one; JSON Lines never means it).
fn strip_bom(buf: &mut Vec<u8>, line: u64) {
    if line == 1 && buf.starts_with(&[0xEF, 0xBB, 0xBF]) {
        buf.drain(..3);
    }
}
