//! Local file access that does not trust what is already on disk.
//!
//! - Only regular files are read as shards, indexes or manifests. A FIFO, device or socket is refused before
//!   a byte is read, so nothing hangs or reads forever.
//! - Small files are read under a cap.
//! - Writes into an output or work directory replace a planted symlink instead of following it.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

/// Which file a path names, as the file system says: device, inode, size and modification time. A write
/// changes the time and a new file renamed over the path changes the inode, while a rename or a hard link of
/// the file changes neither. So a step that hashed or sent a file can tell later, without reading it again,
/// whether the file at a path is still that very one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileId {
    device: u64,
    inode: u64,
    size: u64,
    modified_secs: u64,
    modified_nanos: u32,
}

impl FileId {
    /// The identity of the regular file at `path`, if it can be read. A symlink is never followed.
    pub fn of(path: &Path) -> Option<FileId> {
        FileId::of_metadata(&std::fs::symlink_metadata(path).ok()?)
    }

    /// The identity of the open file `file`, if it is a regular file and can be read.
    pub fn of_open(file: &std::fs::File) -> Option<FileId> {
        FileId::of_metadata(&file.metadata().ok()?)
    }

    fn of_metadata(m: &Metadata) -> Option<FileId> {
        if !m.is_file() {
            return None;
        }
        #[cfg(unix)]
        let (device, inode) = {
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino())
        };
        #[cfg(not(unix))]
        let (device, inode) = (0, 0);
        let modified = m.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?;
        Some(FileId {
            device,
            inode,
            size: m.len(),
            modified_secs: modified.as_secs(),
            modified_nanos: modified.subsec_nanos(),
        })
    }
}

/// What a path is, for messages: `regular file`, `FIFO`, `symbolic link`, …
pub fn kind_of(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "FIFO";
        }
        if t.is_char_device() {
            return "character device";
        }
        if t.is_block_device() {
            return "block device";
        }
        if t.is_socket() {
            return "socket";
        }
    }
    if t.is_symlink() {
        "symbolic link"
    } else if t.is_dir() {
        "directory"
    } else if t.is_file() {
        "regular file"
    } else {
        "special file"
    }
}

fn not_regular(meta: &Metadata) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("not a regular file but a {}; never read", kind_of(meta)))
}

/// Opens `path` for reading only if it is a regular file. It follows symlinks, as a user's path may. The
/// open itself cannot block: a FIFO is opened non-blocking, seen for what it is, and refused.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    Ok(file)
}

/// Reads a small regular file whole, such as an index, a manifest or a card. Refuses one over `cap` bytes.
pub fn read_capped(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let len = file.metadata()?.len();
    if len > cap {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{len} bytes, larger than the {cap}-byte cap for this file"),
        ));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("grew past the {cap}-byte cap while read")));
    }
    Ok(bytes)
}

/// Makes `path` free for a new file. It removes a symlink, special file or empty directory there, never
/// following it. It leaves a regular file for the write to replace. Nothing there is fine.
pub fn clear_for_write(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(m) if m.is_dir() => std::fs::remove_dir(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Writes `bytes` to `path` atomically. It writes and syncs a temporary file beside `path`, then renames it
/// over `path`. The temporary file gets a new file's usual mode, not a temporary file's 0600. The rename
/// replaces a symlink at `path` and never writes through it.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    write_atomic_via(dir, path, bytes)
}

/// [`write_atomic`] with the temporary file in `dir`, which must be on `path`'s file system. Use it when
/// others list `path`'s directory during the write, as with a bundle being uploaded. They would take a
/// temporary file beside `path` for one of theirs.
pub fn write_atomic_via(dir: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut builder = tempfile::Builder::new();
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let mut temp = builder.prefix(&format!(".{name}.")).tempfile_in(dir)?;
    temp.write_all(bytes)?;
    temp.as_file().sync_all()?;
    temp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Creates or truncates a file for writing without following a symlink at its name. A symlink already there
/// is replaced. One planted between that check and the open makes the open fail, not write through.
pub fn create_nofollow(path: &Path) -> io::Result<File> {
    clear_for_write(path)?;
    open_nofollow(path, OpenOptions::new().write(true).create(true).truncate(true))
}

/// Opens an existing file, such as a partial download, to read and append to. It fails on a symlink at its
/// name rather than write through it.
pub fn open_rw_nofollow(path: &Path) -> io::Result<File> {
    open_nofollow(path, OpenOptions::new().read(true).write(true))
}

fn open_nofollow(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW);
    }
    options.open(path)
}

/// Creates `root/rel` as real directories, one component at a time. A symlink or file in the way is
/// replaced by a directory, so nothing is created through a link out of `root`. `rel` must be relative,
/// with plain components only.
pub fn create_dirs_nofollow(root: &Path, rel: &Path) -> io::Result<PathBuf> {
    let mut dir = root.to_owned();
    for component in rel.components() {
        let Component::Normal(name) = component else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: only plain path components may be created", rel.display()),
            ));
        };
        dir.push(name);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => continue,
            Ok(_) => std::fs::remove_file(&dir)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        std::fs::create_dir(&dir)?;
    }
    Ok(dir)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn fifos_and_devices_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("x.safetensors");
        let status = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(status.success());
        let e = open_regular(&fifo).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
        let e = open_regular(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
        let link = dir.path().join("index.json");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(read_capped(&link, 1 << 20).is_err());
    }

    #[test]
    fn an_open_file_is_the_one_its_path_named_until_it_changes_and_renaming_it_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let (path, kept) = (dir.path().join(".m.tmp"), dir.path().join("m.safetensors"));
        std::fs::write(&path, b"shard").unwrap();
        let open = std::fs::File::open(&path).unwrap();
        let id = FileId::of(&path).unwrap();
        assert_eq!(FileId::of_open(&open), Some(id));
        // Kept by a rename, as a repaired shard is: the same file.
        std::fs::rename(&path, &kept).unwrap();
        assert_eq!(FileId::of_open(&open), Some(id));
        assert_eq!(FileId::of(&kept), Some(id));
        // Written to: no longer the file identified.
        std::io::Write::write_all(&mut std::fs::OpenOptions::new().append(true).open(&kept).unwrap(), b"!").unwrap();
        assert_ne!(FileId::of_open(&open), Some(id));
        assert_eq!(FileId::of_open(&std::fs::File::open("/dev/null").unwrap()), None, "not a regular file");
    }

    #[test]
    fn reads_are_capped() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, vec![b'x'; 100]).unwrap();
        assert_eq!(read_capped(&f, 100).unwrap().len(), 100);
        assert!(read_capped(&f, 99).unwrap_err().to_string().contains("cap"));
    }

    #[test]
    fn writes_replace_planted_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("victim"), b"keep").unwrap();
        let root = dir.path().join("out");
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink(outside.join("victim"), root.join("config.json")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("sub")).unwrap();

        std::io::Write::write_all(&mut create_nofollow(&root.join("config.json")).unwrap(), b"new").unwrap();
        let sub = create_dirs_nofollow(&root, Path::new("sub/deeper")).unwrap();
        std::fs::write(sub.join("f"), b"x").unwrap();

        assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"keep");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1, "nothing written through the link");
        assert!(!std::fs::symlink_metadata(root.join("config.json")).unwrap().file_type().is_symlink());
        assert!(std::fs::symlink_metadata(root.join("sub")).unwrap().is_dir());
        assert!(create_dirs_nofollow(&root, Path::new("../escape")).is_err());
        std::os::unix::fs::symlink(outside.join("victim"), root.join("partial")).unwrap();
        assert!(open_rw_nofollow(&root.join("partial")).is_err(), "a resumed partial file is never a link");
    }
}
