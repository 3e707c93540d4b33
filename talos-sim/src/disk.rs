//! A server's install disk: a sparse file of the offer's disk capacity under
//! `--state-dir`. The machine config Talos "installs" lives next to it and is
//! part of the disk's contents: rewriting the disk destroys it.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use crate::image::{self, BootError, ImageHeader};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    /// Kernel name (`nvme0n1`, `sda`).
    pub name: String,
    pub path: PathBuf,
    pub size: u64,
    config_path: PathBuf,
    /// The kubelet's client key and certificate, kept across reboots as
    /// in `/var/lib/kubelet/pki` on a real node.
    kubelet_pki_path: PathBuf,
}

impl Disk {
    pub fn new(state_dir: &Path, server_id: &str, name: &str, size: u64) -> Self {
        let safe: String = server_id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let dir = state_dir.join("disks");
        Self {
            name: name.to_string(),
            path: dir.join(format!("{safe}.img")),
            size,
            config_path: dir.join(format!("{safe}.machine-config.yaml")),
            kubelet_pki_path: dir.join(format!("{safe}.kubelet-client.pem")),
        }
    }

    /// `/dev/<name>`, the path the rescue shell knows the disk by.
    pub fn dev_path(&self) -> String {
        format!("/dev/{}", self.name)
    }

    /// Creates the sparse backing file if it does not exist yet.
    pub fn ensure(&self) -> io::Result<()> {
        if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.path)?;
        if file.metadata()?.len() != self.size {
            file.set_len(self.size)?;
        }
        Ok(())
    }

    /// Opens the disk for writing (and reading, to skip writing zeros over
    /// zeros). Whatever was installed is gone from now on.
    pub fn open_write(&self) -> io::Result<File> {
        self.ensure()?;
        remove_if_exists(&self.config_path)?;
        remove_if_exists(&self.kubelet_pki_path)?;
        OpenOptions::new().read(true).write(true).open(&self.path)
    }

    pub fn open_read(&self) -> io::Result<File> {
        self.ensure()?;
        File::open(&self.path)
    }

    /// What the firmware finds when booting from this disk.
    pub fn verify_image(&self) -> Result<ImageHeader, BootError> {
        let file = self.open_read().map_err(|e| BootError::Io(e.to_string()))?;
        image::verify(io::BufReader::with_capacity(1 << 20, file), self.size)
    }

    pub fn installed_config(&self) -> io::Result<Option<String>> {
        match fs::read_to_string(&self.config_path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Installs a machine config; the kubelet of the previous install (if
    /// any) loses its identity, as a fresh Talos install would.
    pub fn install_config(&self, yaml: &str) -> io::Result<()> {
        self.ensure()?;
        remove_if_exists(&self.kubelet_pki_path)?;
        fs::write(&self.config_path, yaml)
    }

    pub fn kubelet_pki(&self) -> io::Result<Option<String>> {
        match fs::read_to_string(&self.kubelet_pki_path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Stores the kubelet's key and certificate, readable by the owner only.
    pub fn save_kubelet_pki(&self, pem: &str) -> io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&self.kubelet_pki_path)?;
        file.write_all(pem.as_bytes())
    }

    pub fn forget_kubelet_pki(&self) -> io::Result<()> {
        remove_if_exists(&self.kubelet_pki_path)
    }

    /// Removes the disk and what is installed on it (server deleted).
    pub fn wipe(&self) -> io::Result<()> {
        remove_if_exists(&self.config_path)?;
        remove_if_exists(&self.kubelet_pki_path)?;
        remove_if_exists(&self.path)
    }
}

fn remove_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_is_sparse_and_sized_like_the_offer() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Disk::new(dir.path(), "srv/1", "nvme0n1", 1 << 40);
        disk.ensure().unwrap();
        let meta = fs::metadata(&disk.path).unwrap();
        assert_eq!(meta.len(), 1 << 40);
        assert!(disk.path.ends_with("disks/srv_1.img"));
        assert_eq!(disk.dev_path(), "/dev/nvme0n1");
        assert!(matches!(disk.verify_image(), Err(BootError::Blank)));
    }

    #[test]
    fn writing_the_disk_drops_the_installed_config() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Disk::new(dir.path(), "srv", "sda", 1 << 20);
        disk.install_config("version: v1alpha1").unwrap();
        assert_eq!(
            disk.installed_config().unwrap().as_deref(),
            Some("version: v1alpha1")
        );
        disk.save_kubelet_pki("CERT+KEY").unwrap();
        assert_eq!(disk.kubelet_pki().unwrap().as_deref(), Some("CERT+KEY"));
        drop(disk.open_write().unwrap());
        assert_eq!(disk.installed_config().unwrap(), None);
        assert_eq!(disk.kubelet_pki().unwrap(), None);
        disk.wipe().unwrap();
        assert!(!disk.path.exists());
    }
}
