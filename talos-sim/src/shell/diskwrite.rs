//! Writes to the server's disk, shared by `dd of=` and `tee`: bounded by the
//! disk's capacity, keeping the sparse file's holes where zeros land on
//! zeros, and where the write-side faults act. Those watch for an image
//! header at offset 0 to learn the image's length, so they strike "half way
//! through the image" whatever the pipeline's chunk sizes are.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::FaultHooks;
use crate::disk::Disk;
use crate::faults::FaultKind;
use crate::image::{HEADER_LEN, ImageHeader};
use crate::timings::{Throttle, WriteRate};

/// Zero runs shorter than this are written rather than checked: checking
/// costs a read, and holes are only worth keeping when large.
const GRANULE: usize = 64 << 10;

#[derive(Debug)]
pub(crate) enum WriteError {
    /// The end of the disk was reached after `written` bytes of the block.
    NoSpace {
        written: u64,
    },
    /// The `ssh_drop_during_dd` fault cut the network: the writing process
    /// dies with its session.
    LinkDown,
    Io(io::Error),
}

pub(crate) struct DiskWriter {
    file: File,
    offset: u64,
    capacity: u64,
    hooks: FaultHooks,
    /// The first bytes of a write that started at offset 0, until the
    /// image header is complete.
    head: Option<Vec<u8>>,
    watch_corrupt: bool,
    watch_drop: bool,
    corrupt_at: Option<u64>,
    drop_at: Option<u64>,
    scratch: Vec<u8>,
    throttle: Option<Throttle>,
}

impl DiskWriter {
    /// Opens the disk for writing at `offset` (this destroys what was
    /// installed on it).
    pub fn open(disk: &Disk, offset: u64, hooks: FaultHooks) -> io::Result<Self> {
        let file = disk.open_write()?;
        let from_start = offset == 0;
        Ok(Self {
            file,
            offset,
            capacity: disk.size,
            watch_corrupt: from_start && hooks.armed(FaultKind::CorruptWrite),
            watch_drop: from_start && hooks.armed(FaultKind::SshDropDuringDd),
            hooks,
            head: from_start.then(Vec::new),
            corrupt_at: None,
            drop_at: None,
            scratch: Vec::new(),
            throttle: None,
        })
    }

    /// Paces the writes to `rate` (a real disk's speed), when one is set.
    pub fn throttled(mut self, rate: Option<WriteRate>) -> Self {
        self.throttle = rate.map(Throttle::new);
        self
    }

    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    /// Learns the image's length from its header, once the header is in.
    fn observe(&mut self, data: &[u8]) {
        let Some(head) = &mut self.head else {
            return;
        };
        let want = HEADER_LEN - head.len();
        head.extend_from_slice(&data[..want.min(data.len())]);
        if head.len() < HEADER_LEN {
            return;
        }
        if let Ok(header) = ImageHeader::parse(head) {
            // Half way through, past the header so the image still looks
            // like one (the payload check is what fails).
            let middle = (HEADER_LEN as u64 + header.payload_length) / 2;
            let at = middle.max(HEADER_LEN as u64);
            if self.watch_corrupt {
                self.corrupt_at = Some(at);
            }
            if self.watch_drop {
                self.drop_at = Some(at);
            }
        }
        self.head = None;
    }

    /// Writes `data` at the current offset.
    pub fn write(&mut self, data: &[u8]) -> Result<(), WriteError> {
        self.observe(data);
        let room = self.capacity.saturating_sub(self.offset);
        let fits = (data.len() as u64).min(room) as usize;
        let end = self.offset + fits as u64;
        let mut block = std::borrow::Cow::Borrowed(&data[..fits]);

        if let Some(at) = self.corrupt_at
            && (self.offset..end).contains(&at)
        {
            self.corrupt_at = None;
            if self.hooks.take(FaultKind::CorruptWrite) {
                let i = (at - self.offset) as usize;
                block.to_mut()[i] ^= 0xff;
            }
        }
        if let Some(at) = self.drop_at
            && (self.offset..end).contains(&at)
        {
            self.drop_at = None;
            if self.hooks.take(FaultKind::SshDropDuringDd) {
                let before = (at - self.offset) as usize;
                self.put(&block[..before]).map_err(WriteError::Io)?;
                self.hooks.link_down.notify_one();
                return Err(WriteError::LinkDown);
            }
        }
        self.put(&block).map_err(WriteError::Io)?;
        if let Some(throttle) = &mut self.throttle {
            throttle.wrote(block.len() as u64);
        }
        if fits < data.len() {
            return Err(WriteError::NoSpace {
                written: fits as u64,
            });
        }
        Ok(())
    }

    /// Writes at the current offset and advances it; zero granules landing
    /// on zeros are skipped so holes stay holes.
    fn put(&mut self, data: &[u8]) -> io::Result<()> {
        let mut pending = 0; // start of the run not written yet
        let mut at = 0;
        while at < data.len() {
            let len = GRANULE.min(data.len() - at);
            let granule = &data[at..at + len];
            if len == GRANULE && is_zero(granule) && self.reads_zero(at as u64, len)? {
                self.file
                    .write_all_at(&data[pending..at], self.offset + pending as u64)?;
                pending = at + len;
            }
            at += len;
        }
        self.file
            .write_all_at(&data[pending..], self.offset + pending as u64)?;
        self.offset += data.len() as u64;
        Ok(())
    }

    fn reads_zero(&mut self, rel: u64, len: usize) -> io::Result<bool> {
        self.scratch.resize(len, 0);
        let mut filled = 0;
        while filled < len {
            match self.file.read_at(
                &mut self.scratch[filled..],
                self.offset + rel + filled as u64,
            )? {
                0 => break, // past the end of the file: reads as zeros
                n => filled += n,
            }
        }
        Ok(is_zero(&self.scratch[..filled]))
    }
}

fn is_zero(data: &[u8]) -> bool {
    data.iter().all(|b| *b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::{FaultSpec, Faults};
    use crate::image::{Compression, write_image};
    use std::os::unix::fs::MetadataExt;
    use std::sync::Arc;

    fn disk(size: u64) -> (tempfile::TempDir, Disk) {
        let dir = tempfile::tempdir().unwrap();
        let disk = Disk::new(dir.path(), "srv", "sda", size);
        disk.ensure().unwrap();
        (dir, disk)
    }

    fn hooks(kind: Option<FaultKind>) -> FaultHooks {
        let faults = Arc::new(Faults::default());
        if let Some(kind) = kind {
            faults
                .add(FaultSpec {
                    kind,
                    server_id: None,
                    node_name: None,
                    count: None,
                    delay_ms: None,
                })
                .unwrap();
        }
        FaultHooks {
            server_id: "srv".into(),
            faults,
            ..Default::default()
        }
    }

    #[test]
    fn zeros_over_zeros_stay_holes_and_zeros_over_data_are_written() {
        let (_dir, disk) = disk(64 << 20);
        let mut w = DiskWriter::open(&disk, 0, hooks(None)).unwrap();
        let mut block = vec![0u8; 16 << 20];
        block[0] = 1;
        w.write(&block).unwrap();
        let allocated = std::fs::metadata(&disk.path).unwrap().blocks() * 512;
        assert!(allocated < 1 << 20, "{allocated} bytes allocated");

        // Data first, then zeros over it: the zeros must land.
        let mut w = DiskWriter::open(&disk, 0, hooks(None)).unwrap();
        w.write(&vec![7u8; 256 << 10]).unwrap();
        let mut w = DiskWriter::open(&disk, 0, hooks(None)).unwrap();
        w.write(&vec![0u8; 256 << 10]).unwrap();
        let back = std::fs::read(&disk.path).unwrap();
        assert!(back[..256 << 10].iter().all(|b| *b == 0));
    }

    #[test]
    fn the_end_of_the_disk_stops_a_write() {
        let (_dir, disk) = disk(10_000);
        let mut w = DiskWriter::open(&disk, 0, hooks(None)).unwrap();
        w.write(&[1u8; 8000]).unwrap();
        match w.write(&[2u8; 4000]) {
            Err(WriteError::NoSpace { written }) => assert_eq!(written, 2000),
            other => panic!("{other:?}"),
        }
    }

    fn image(size: u64) -> Vec<u8> {
        let mut out = Vec::new();
        write_image("v1.13.9", "amd64", size, Compression::None, &mut out).unwrap();
        out
    }

    #[test]
    fn corrupt_write_flips_one_byte_half_way_through_an_image() {
        let (_dir, disk) = disk(4 << 20);
        let img = image(1 << 20);
        let hooks = hooks(Some(FaultKind::CorruptWrite));
        let mut w = DiskWriter::open(&disk, 0, hooks.clone()).unwrap();
        for chunk in img.chunks(100_000) {
            w.write(chunk).unwrap();
        }
        let back = std::fs::read(&disk.path).unwrap();
        let diff: Vec<usize> = (0..img.len()).filter(|i| back[*i] != img[*i]).collect();
        assert_eq!(diff, vec![(1 << 20) / 2]);
        assert_eq!(hooks.faults.list()[0].fired, 1);
        // Spent: the next write is faithful.
        let mut w = DiskWriter::open(&disk, 0, hooks).unwrap();
        w.write(&img).unwrap();
        assert_eq!(&std::fs::read(&disk.path).unwrap()[..img.len()], &img[..]);
    }

    #[test]
    fn ssh_drop_stops_the_write_half_way_and_signals_the_link() {
        let (_dir, disk) = disk(4 << 20);
        let img = image(1 << 20);
        let hooks = hooks(Some(FaultKind::SshDropDuringDd));
        let mut w = DiskWriter::open(&disk, 0, hooks.clone()).unwrap();
        let mut written = 0;
        let mut outcome = None;
        for chunk in img.chunks(300_000) {
            match w.write(chunk) {
                Ok(()) => written += chunk.len(),
                Err(e) => {
                    outcome = Some(e);
                    break;
                }
            }
        }
        assert!(matches!(outcome, Some(WriteError::LinkDown)), "{outcome:?}");
        assert_eq!(written, 300_000);
        let back = std::fs::read(&disk.path).unwrap();
        let half = (1 << 20) / 2;
        assert_eq!(&back[..half], &img[..half]);
        assert!(back[half..img.len()].iter().all(|b| *b == 0));
        // The rescue boot is told to cut the connections.
        assert!(
            futures::FutureExt::now_or_never(hooks.link_down.notified()).is_some(),
            "link_down was not notified"
        );
    }

    #[test]
    fn a_write_rate_paces_the_writes() {
        let (_dir, disk) = disk(4 << 20);
        let started = std::time::Instant::now();
        let mut w = DiskWriter::open(&disk, 0, hooks(None))
            .unwrap()
            .throttled(Some(WriteRate::mb_per_s(8.0)));
        for _ in 0..4 {
            w.write(&[3u8; 500_000]).unwrap();
        }
        // 2 MB at 8 MB/s; unpaced, this takes a few milliseconds.
        let took = started.elapsed();
        assert!(took >= std::time::Duration::from_millis(250), "{took:?}");
        assert!(
            std::fs::read(&disk.path).unwrap()[..2_000_000]
                .iter()
                .all(|b| *b == 3)
        );
    }

    #[test]
    fn writes_that_are_not_images_are_left_alone() {
        let (_dir, disk) = disk(4 << 20);
        let hooks = hooks(Some(FaultKind::CorruptWrite));
        let mut w = DiskWriter::open(&disk, 0, hooks.clone()).unwrap();
        w.write(&vec![5u8; 1 << 20]).unwrap();
        assert!(
            std::fs::read(&disk.path).unwrap()[..1 << 20]
                .iter()
                .all(|b| *b == 5)
        );
        assert_eq!(hooks.faults.list()[0].fired, 0);
    }
}
