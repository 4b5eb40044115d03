//! The job secret: 32 random bytes that every process of a job holds and nobody else.
//!
//! It is the job's credential. A process proves that it knows it (a keyed BLAKE3 hash over
//! a transcript that includes the other side's fresh nonce) instead of sending it, so
//! neither a listener nor an impostor server learns it; every use gets its own subkey
//! ([`Secret::derive`], BLAKE3's key derivation), so a proof for one purpose never serves
//! another. The packet cookie ([`Secret::cookie`]) is derived from it too: a public tag
//! that cheaply screens out other jobs' stray packets, not a credential.
//!
//! It travels only where other users cannot read it: the environment of a process (its
//! `/proc/PID/environ` is readable by its owner and root only), a remote shell's standard
//! input, a launcher's private key-value store, or a file only its owner may read
//! ([`read_key_file`]). Never a command line, a message or a log.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// A job's secret (see the module documentation). `Debug` never shows the bytes, and there
/// is no `Display`: to hand it over on purpose, use [`Secret::to_hex`].
#[derive(Clone)]
pub struct Secret([u8; 32]);

impl Secret {
    /// A fresh secret from the kernel's random source (`getrandom(2)`).
    pub fn generate() -> Secret {
        let mut b = [0u8; 32];
        crate::sys::random_bytes(&mut b);
        Secret(b)
    }

    /// A secret from its 64 hex digits (either case, surrounding blanks ignored).
    pub fn from_hex(s: &str) -> Option<Secret> {
        let s = s.trim().as_bytes();
        if s.len() != 64 {
            return None;
        }
        let mut b = [0u8; 32];
        for (i, pair) in s.chunks(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16)?;
            let lo = (pair[1] as char).to_digit(16)?;
            b[i] = (hi * 16 + lo) as u8;
        }
        Some(Secret(b))
    }

    /// The 64 lowercase hex digits (to put in a child's environment or a private file).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// A subkey for one purpose, named by `context` (`"bulkwire 1 packet mac"`).
    pub fn derive(&self, context: &str) -> [u8; 32] {
        blake3::derive_key(context, &self.0)
    }

    /// The packet cookie: a public tag derived from the secret.
    pub fn cookie(&self) -> u32 {
        let k = self.derive("bulkwire 1 cookie");
        u32::from_le_bytes([k[0], k[1], k[2], k[3]])
    }

    /// A proof of knowing the secret over `transcript`, for the purpose `context`.
    pub fn prove(&self, context: &str, transcript: &[u8]) -> [u8; 32] {
        *blake3::keyed_hash(&self.derive(context), transcript).as_bytes()
    }

    /// Whether `proof` is [`Secret::prove`]`(context, transcript)`, in constant time.
    pub fn verify(&self, context: &str, transcript: &[u8], proof: &[u8]) -> bool {
        let Ok(p) = <[u8; 32]>::try_from(proof) else {
            return false;
        };
        // blake3::Hash's `==` compares in constant time.
        blake3::keyed_hash(&self.derive(context), transcript) == blake3::Hash::from(p)
    }

    /// A secret of its own for `name`, derived from this one (the job secret of a job
    /// named `name` from a user key, where the launcher offers no private channel).
    pub fn derive_for(&self, context: &str, name: &str) -> Secret {
        Secret(self.prove(context, name.as_bytes()))
    }
}

impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        // Constant time, like every comparison involving the secret.
        blake3::Hash::from(self.0) == blake3::Hash::from(other.0)
    }
}

impl Eq for Secret {}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Reads a secret (64 hex digits) from the file `path`, refused, naming the path and why,
/// when others could have read or replaced it: a symbolic link, not a regular file, not
/// owned by this user, or readable or writable by group or others (as ssh treats private
/// keys). The error never contains the file's content.
pub fn read_key_file(path: &Path) -> Result<Secret, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let shown = path.display();
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{shown}: {e}"))?;
    if meta.file_type().is_symlink() {
        return Err(format!(
            "{shown} is a symbolic link: a key file must be a plain file of yours"
        ));
    }
    // O_NOFOLLOW: a link swapped in after the check is refused too.
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("{shown}: {e}"))?;
    let meta = f.metadata().map_err(|e| format!("{shown}: {e}"))?;
    check_private(&meta, &shown.to_string())?;
    let mut text = String::new();
    f.by_ref()
        .take(256)
        .read_to_string(&mut text)
        .map_err(|e| format!("{shown}: {e}"))?;
    Secret::from_hex(&text).ok_or_else(|| {
        format!("{shown}: expected 64 hex digits (32 bytes), found something else (value hidden)")
    })
}

/// Refuses a key file others could read or replace.
fn check_private(meta: &std::fs::Metadata, shown: &str) -> Result<(), String> {
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "{shown} is owned by uid {}, not by this user (uid {me})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{shown} has mode {:04o}: group and others must have no access (chmod 600 {shown})",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Creates `path` (which must not exist yet, and is no link) with mode 0600 and writes the
/// secret's hex digits and a newline into it.
pub fn write_key_file(path: &Path, secret: &Secret) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    f.write_all(format!("{}\n", secret.to_hex()).as_bytes())?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let s = Secret::generate();
        let h = s.to_hex();
        assert_eq!(h.len(), 64);
        assert_eq!(Secret::from_hex(&h), Some(s.clone()));
        assert_eq!(Secret::from_hex(&h.to_uppercase()), Some(s));
        assert!(Secret::from_hex(&h[..63]).is_none());
        assert!(Secret::from_hex(&format!("{}g", &h[..63])).is_none());
        assert!(Secret::from_hex("é".repeat(32).as_str()).is_none());
        assert_ne!(Secret::generate(), Secret::generate());
    }

    #[test]
    fn debug_hides_the_bytes() {
        let s = Secret::from_hex(&"ab".repeat(32)).unwrap();
        let d = format!("{s:?} {:?}", Some(&s));
        assert!(!d.contains("ab") && !d.contains("171"), "{d}");
        assert!(d.contains("Secret(..)"));
    }

    #[test]
    fn proofs_verify_and_depend_on_everything() {
        let s = Secret::generate();
        let p = s.prove("bulkwire 1 hello", b"transcript");
        assert!(s.verify("bulkwire 1 hello", b"transcript", &p));
        assert!(!s.verify("bulkwire 1 hello", b"transcripT", &p));
        assert!(!s.verify("bulkwire 1 welcome", b"transcript", &p));
        assert!(!s.verify("bulkwire 1 hello", b"transcript", &p[..31]));
        assert!(!Secret::generate().verify("bulkwire 1 hello", b"transcript", &p));
        assert_ne!(s.derive("a"), s.derive("b"));
        assert_eq!(s.cookie(), s.clone().cookie());
        let d = s.derive_for("bulkwire 1 derived job", "slurm:1.0");
        assert_eq!(d, s.derive_for("bulkwire 1 derived job", "slurm:1.0"));
        assert_ne!(d, s.derive_for("bulkwire 1 derived job", "slurm:1.1"));
    }

    #[test]
    fn key_files_must_be_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("bw-key-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let s = Secret::generate();
        let key = dir.join("key");
        write_key_file(&key, &s).unwrap();
        assert_eq!(read_key_file(&key).unwrap(), s);
        assert!(write_key_file(&key, &s).is_err(), "must not overwrite");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
        let e = read_key_file(&key).unwrap_err();
        assert!(e.contains("mode 0640") && e.contains("key"), "{e}");
        assert!(!e.contains(&s.to_hex()));
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&key, &link).unwrap();
        let e = read_key_file(&link).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        std::fs::write(dir.join("bad"), "zz").unwrap();
        std::fs::set_permissions(dir.join("bad"), std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(
            read_key_file(&dir.join("bad"))
                .unwrap_err()
                .contains("value hidden")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
