//! A connection that dies when its server powers off. Libraries that run a
//! connection on their own task (russh) cannot be aborted from outside, so
//! the socket itself fails every read and write once the token is cancelled.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

pub struct Killable<S> {
    inner: S,
    killed: Pin<Box<WaitForCancellationFutureOwned>>,
    dead: bool,
}

impl<S> Killable<S> {
    pub fn new(inner: S, token: CancellationToken) -> Self {
        Self {
            inner,
            killed: Box::pin(token.cancelled_owned()),
            dead: false,
        }
    }

    /// Whether the power went off; also registers the waker so that a
    /// pending read or write is woken when it does.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if !self.dead && self.killed.as_mut().poll(cx).is_ready() {
            self.dead = true;
        }
        if self.dead {
            Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "server powered off",
            ))
        } else {
            Ok(())
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Killable<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = this.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Killable<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Err(e) = this.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = this.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn cancel_fails_a_pending_read() {
        let (a, mut b) = tokio::io::duplex(64);
        let token = CancellationToken::new();
        let mut conn = Killable::new(a, token.clone());
        b.write_all(b"hi").await.unwrap();
        let mut buf = [0u8; 2];
        conn.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hi");
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 1];
            conn.read(&mut buf).await
        });
        tokio::task::yield_now().await;
        token.cancel();
        let err = reader.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionAborted);
    }
}
