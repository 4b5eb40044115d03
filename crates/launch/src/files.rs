//! Files and directories the library and the tools create at paths a user names
//! (`BULKWIRE_PROFILE`, `bwbench --out`) or in shared directories such as `/tmp`.
//!
//! A job often runs as another user than the one who owns the directory, and `/tmp` is
//! writable by everyone: a plain `File::create` there follows a symbolic link another user
//! planted, so a root job would overwrite whatever the link names. So files are opened
//! with `O_NOFOLLOW` and refused unless they are regular files of this user with a single
//! name (a hard link to someone else's file is refused too), and are created mode 0600;
//! directories are created mode 0700 and refused when they are links, another user's, or
//! writable by others.

use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn refused(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why)
}

/// Opens `path` for writing, empty, creating it mode 0600 if it does not exist; never
/// through a symbolic link (the last component), and only a regular file of this user
/// with one name. The errors name the path.
pub fn create_private(path: &Path) -> io::Result<File> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        // A FIFO planted at the path must not block the open.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .mode(0o600)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                refused(format!(
                    "{} is a symbolic link, which is not followed: remove it or name another path",
                    path.display()
                ))
            } else {
                io::Error::new(e.kind(), format!("{}: {e}", path.display()))
            }
        })?;
    let m = f.metadata()?;
    if !m.file_type().is_file() {
        return Err(refused(format!("{} is not a regular file", path.display())));
    }
    if m.uid() != euid() {
        return Err(refused(format!(
            "{} belongs to another user (uid {}); not overwritten",
            path.display(),
            m.uid()
        )));
    }
    if m.nlink() != 1 {
        return Err(refused(format!(
            "{} has {} names (hard links); not overwritten",
            path.display(),
            m.nlink()
        )));
    }
    // Only now that it is known to be ours: empty it and make it private.
    f.set_len(0)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(f)
}

/// Writes `data` to `path` as [`create_private`] opens it.
pub fn write_private(path: &Path, data: impl AsRef<[u8]>) -> io::Result<()> {
    use std::io::Write;
    let mut f = create_private(path)?;
    f.write_all(data.as_ref())
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Creates the directory `path` mode 0700 (its parents as `create_dir_all` does), or
/// accepts it if it exists as a real directory of this user that no one else may write.
pub fn private_dir(path: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        }
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    }
    let m = std::fs::symlink_metadata(path)?;
    if m.file_type().is_symlink() {
        return Err(refused(format!(
            "{} is a symbolic link, which is not followed: remove it or name another path",
            path.display()
        )));
    }
    if !m.is_dir() {
        return Err(refused(format!("{} is not a directory", path.display())));
    }
    if m.uid() != euid() {
        return Err(refused(format!(
            "{} belongs to another user (uid {})",
            path.display(),
            m.uid()
        )));
    }
    if m.mode() & 0o022 != 0 {
        return Err(refused(format!(
            "{} may be written by other users (mode {:o})",
            path.display(),
            m.mode() & 0o777
        )));
    }
    Ok(())
}

/// A fresh directory under `parent` named `prefix` and a random suffix, mode 0700 (for
/// work files under a shared `/tmp`: no name another user could have guessed first).
pub fn fresh_dir(parent: &Path, prefix: &str) -> io::Result<std::path::PathBuf> {
    for _ in 0..16 {
        let mut r = [0u8; 8];
        getrandom(&mut r);
        let p = parent.join(format!("{prefix}{:016x}", u64::from_le_bytes(r)));
        match std::fs::DirBuilder::new().mode(0o700).create(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", p.display()))),
        }
    }
    Err(io::Error::other(format!(
        "no fresh directory {prefix}* could be made in {}",
        parent.display()
    )))
}

fn getrandom(buf: &mut [u8]) {
    // SAFETY: the kernel writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != buf.len() as isize {
        // Unpredictability is wanted, not uniqueness alone: fall back to time and pid,
        // and rely on the exclusive create for the rest.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ ((std::process::id() as u64) << 32);
        for (b, s) in buf.iter_mut().zip(t.to_le_bytes()) {
            *b = s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> std::path::PathBuf {
        fresh_dir(&std::env::temp_dir(), "bulkwire-files-test-").unwrap()
    }

    #[test]
    fn a_link_is_not_followed_and_its_target_is_untouched() {
        let d = scratch();
        let target = d.join("target");
        std::fs::write(&target, b"precious").unwrap();
        let link = d.join("profile.0");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let e = create_private(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(e.to_string().contains(&*link.to_string_lossy()), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        // A hard link to a file is refused as well.
        let hard = d.join("hard");
        std::fs::hard_link(&target, &hard).unwrap();
        let e = create_private(&hard).unwrap_err();
        assert!(e.to_string().contains("hard links"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn files_are_private_and_emptied() {
        let d = scratch();
        let p = d.join("f");
        write_private(&p, b"a long first text").unwrap();
        write_private(&p, b"short").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"short");
        let mode = std::fs::metadata(&p).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn directories_that_are_links_or_open_to_others_are_refused() {
        let d = scratch();
        let real = d.join("real");
        private_dir(&real).unwrap();
        private_dir(&real).unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = private_dir(&link).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let open = d.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = private_dir(&open).unwrap_err();
        assert!(e.to_string().contains("written by other users"), "{e}");
        private_dir(&d.join("a/b")).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }
}
