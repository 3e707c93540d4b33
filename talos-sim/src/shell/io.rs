//! Streams between pipeline stages: bounded channels of byte chunks, so that
//! an image much larger than memory flows through `curl | xz -d | dd` with
//! backpressure, as through real pipes.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{Mutex, mpsc};

/// Chunks in flight per pipe; with ~64 KiB chunks this is about the memory a
/// few kernel pipe buffers would hold.
pub const PIPE_DEPTH: usize = 16;

/// A command's standard input. Clones share the same stream, as the commands
/// of one `a; b` list share the shell's stdin.
#[derive(Clone, Default)]
pub struct Input(Option<Arc<Mutex<mpsc::Receiver<Bytes>>>>);

impl Input {
    /// Like `< /dev/null`.
    pub fn empty() -> Self {
        Self(None)
    }

    pub fn from_receiver(rx: mpsc::Receiver<Bytes>) -> Self {
        Self(Some(Arc::new(Mutex::new(rx))))
    }

    /// The next chunk, or `None` at end of input.
    pub async fn read(&self) -> Option<Bytes> {
        match &self.0 {
            None => None,
            Some(rx) => rx.lock().await.recv().await,
        }
    }

    /// For commands running on a blocking thread.
    pub fn blocking_read(&self) -> Option<Bytes> {
        match &self.0 {
            None => None,
            Some(rx) => rx.blocking_lock().blocking_recv(),
        }
    }
}

/// The reader of the pipe is gone (SIGPIPE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokenPipe;

/// Exit status of a process killed by SIGPIPE.
pub const SIGPIPE_STATUS: i32 = 128 + 13;

/// Exit status of a process killed by SIGHUP (its session went away).
pub const SIGHUP_STATUS: i32 = 128 + 1;

/// How long a process killed by the `ssh_drop_during_dd` network cut takes to
/// "die": long enough for the cut to close its connection first, so that, as
/// over a real cut link, the client never receives an exit status.
pub const LINK_DOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The exit of a process whose session was cut; call from a blocking thread.
pub fn hung_up_by_link_down() -> i32 {
    std::thread::sleep(LINK_DOWN_GRACE);
    SIGHUP_STATUS
}

/// A command's standard output or error. `Output::null()` is `/dev/null`.
#[derive(Clone, Default)]
pub struct Output(Option<mpsc::Sender<Bytes>>);

impl Output {
    pub fn null() -> Self {
        Self(None)
    }

    pub fn from_sender(tx: mpsc::Sender<Bytes>) -> Self {
        Self(Some(tx))
    }

    pub async fn write(&self, data: impl Into<Bytes>) -> Result<(), BrokenPipe> {
        let data = data.into();
        match &self.0 {
            Some(tx) if !data.is_empty() => tx.send(data).await.map_err(|_| BrokenPipe),
            _ => Ok(()),
        }
    }

    pub fn blocking_write(&self, data: impl Into<Bytes>) -> Result<(), BrokenPipe> {
        let data = data.into();
        match &self.0 {
            Some(tx) if !data.is_empty() => tx.blocking_send(data).map_err(|_| BrokenPipe),
            _ => Ok(()),
        }
    }

    /// Writes a diagnostic; a closed stderr is not worth failing over.
    pub async fn say(&self, text: impl Into<String>) {
        let _ = self.write(text.into()).await;
    }

    pub fn blocking_say(&self, text: impl Into<String>) {
        let _ = self.blocking_write(text.into());
    }
}

/// A new pipe: what is written to the `Output` is read from the `Input`.
pub fn pipe() -> (Output, Input) {
    let (tx, rx) = mpsc::channel(PIPE_DEPTH);
    (Output::from_sender(tx), Input::from_receiver(rx))
}

/// The three standard streams of a command.
#[derive(Clone, Default)]
pub struct Stdio {
    pub stdin: Input,
    pub stdout: Output,
    pub stderr: Output,
}

/// `std::io::Read` over an `Input`, for decoders running on blocking threads.
pub struct BlockingReader {
    input: Input,
    chunk: Bytes,
}

impl BlockingReader {
    pub fn new(input: Input) -> Self {
        Self {
            input,
            chunk: Bytes::new(),
        }
    }
}

impl io::Read for BlockingReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.chunk.is_empty() {
            match self.input.blocking_read() {
                Some(chunk) => self.chunk = chunk,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk.split_to(n));
        Ok(n)
    }
}

/// `std::io::Write` over an `Output`; a gone reader is `BrokenPipe`.
pub struct BlockingWriter(pub Output);

impl io::Write for BlockingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .blocking_write(Bytes::copy_from_slice(buf))
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Collects everything written to an `Output` (tests and `$(...)`-free
/// callers that want a command's whole output).
pub fn collector() -> (Output, tokio::task::JoinHandle<Vec<u8>>) {
    let (out, input) = pipe();
    let task = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(chunk) = input.read().await {
            all.extend_from_slice(&chunk);
        }
        all
    });
    (out, task)
}

/// An `Input` that yields `data` and then ends.
pub fn input_from(data: impl Into<Bytes>) -> Input {
    let data = data.into();
    let (tx, rx) = mpsc::channel(1);
    if !data.is_empty() {
        tx.try_send(data).expect("fresh channel has room");
    }
    Input::from_receiver(rx)
}
