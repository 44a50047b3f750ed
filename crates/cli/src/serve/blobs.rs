//! Attachments' sealed parts under `nyx5 serve` (docs/SPEC.md "Attachments"): one file per part
//! in a directory beside the database (`<db>.attachments/`, or `--attachments DIR`). A part is
//! written to a temporary file and renamed into place, so a reader never sees half of one.

use std::path::{Path, PathBuf};

use nyx5_house::ports::{Blobs, PortError, PortFuture};

/// The directory of parts.
#[derive(Debug)]
pub(super) struct DiskBlobs {
    dir: PathBuf,
}

impl DiskBlobs {
    /// Parts kept under `dir` (created when first written).
    pub(super) fn new(dir: PathBuf) -> DiskBlobs {
        DiskBlobs { dir }
    }

    /// The file of `key`: only the house's own keys (`att/<id>/<n>`: letters, digits, `-`, `/`),
    /// never one that climbs out of the directory.
    fn path(&self, key: &str) -> Result<PathBuf, PortError> {
        let plain = !key.is_empty()
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'/')
            && key.split('/').all(|s| !s.is_empty());
        if !plain {
            return Err(PortError::Failed(format!("not a part's key: {key:?}")));
        }
        Ok(self.dir.join(Path::new(key)))
    }
}

fn failed(what: &str, e: std::io::Error) -> PortError {
    PortError::Failed(format!("{what}: {e}"))
}

impl Blobs for DiskBlobs {
    fn put<'a>(&'a self, key: &'a str, bytes: Vec<u8>) -> PortFuture<'a, Result<(), PortError>> {
        Box::pin(async move {
            let path = self.path(key)?;
            let parent = path.parent().ok_or_else(|| PortError::Failed("no directory".into()))?;
            std::fs::create_dir_all(parent).map_err(|e| failed("creating the parts' directory", e))?;
            let tmp = path.with_extension("part");
            std::fs::write(&tmp, &bytes).map_err(|e| failed("writing a part", e))?;
            std::fs::rename(&tmp, &path).map_err(|e| failed("keeping a part", e))
        })
    }

    fn get<'a>(&'a self, key: &'a str) -> PortFuture<'a, Result<Option<Vec<u8>>, PortError>> {
        Box::pin(async move {
            match std::fs::read(self.path(key)?) {
                Ok(b) => Ok(Some(b)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(failed("reading a part", e)),
            }
        })
    }

    fn delete<'a>(&'a self, keys: Vec<String>) -> PortFuture<'a, Result<(), PortError>> {
        Box::pin(async move {
            for key in &keys {
                let path = self.path(key)?;
                // The part, and a temporary one a failed write may have left.
                for file in [path.clone(), path.with_extension("part")] {
                    match std::fs::remove_file(&file) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(failed("removing a part", e)),
                    }
                }
                // The attachment's directory, once empty (another part may still be there).
                if let Some(parent) = path.parent() {
                    let _ = std::fs::remove_dir(parent);
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn run<T>(f: PortFuture<'_, T>) -> T {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match std::pin::pin!(f).poll(&mut cx) {
            std::task::Poll::Ready(v) => v,
            std::task::Poll::Pending => panic!("the disk answers at once"),
        }
    }

    #[test]
    fn parts_are_kept_read_and_removed_and_keys_stay_inside() {
        let dir = std::env::temp_dir().join(format!("nyx5-blobs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let b = DiskBlobs::new(dir.clone());
        run(b.put("att/abc-1/0", vec![1, 2, 3])).unwrap();
        assert_eq!(run(b.get("att/abc-1/0")).unwrap(), Some(vec![1, 2, 3]));
        assert_eq!(run(b.get("att/abc-1/1")).unwrap(), None);
        for bad in ["../x", "att/../../x", "/etc/passwd", "att//0", "att/a.b/0", ""] {
            assert!(run(b.put(bad, vec![1])).is_err(), "{bad}");
            assert!(run(b.get(bad)).is_err(), "{bad}");
        }
        run(b.delete(vec!["att/abc-1/0".into(), "att/abc-1/1".into()])).unwrap();
        assert_eq!(run(b.get("att/abc-1/0")).unwrap(), None);
        assert!(!dir.join("att/abc-1").exists(), "the emptied directory goes too");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
