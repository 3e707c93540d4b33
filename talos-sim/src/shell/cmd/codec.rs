//! `xz` and `zstd` as filters (stdin to stdout): real decompression with
//! liblzma and zstd on a blocking thread, streaming between the pipes.

use std::io::{self, Read};

use super::Flags;
use crate::shell::io::{BlockingReader, BlockingWriter, SIGPIPE_STATUS, Stdio};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    Xz,
    Zstd,
}

impl Codec {
    fn tool(self) -> &'static str {
        match self {
            Codec::Xz => "xz",
            Codec::Zstd => "zstd",
        }
    }

    /// How the tool names standard input in its messages.
    fn stdin_name(self) -> &'static str {
        match self {
            Codec::Xz => "(stdin)",
            Codec::Zstd => "/*stdin*\\",
        }
    }
}

pub async fn xz(name: &str, args: &[String], io: Stdio) -> i32 {
    filter(Codec::Xz, name, args, io).await
}

pub async fn zstd(name: &str, args: &[String], io: Stdio) -> i32 {
    filter(Codec::Zstd, name, args, io).await
}

async fn filter(codec: Codec, name: &str, args: &[String], io: Stdio) -> i32 {
    let tool = codec.tool();
    let mut decompress = name.starts_with("un") || name.ends_with("cat");
    let mut flags = Flags::new(args);
    loop {
        let flag = match flags.next_flag() {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(msg) => return usage(&io, tool, &msg).await,
        };
        match flag.as_str() {
            "d" | "decompress" | "uncompress" => decompress = true,
            "z" | "compress" => decompress = false,
            // Reading stdin always writes stdout; keeping and forcing only
            // matter for files.
            "c" | "stdout" | "to-stdout" | "k" | "keep" | "f" | "force" | "q" | "quiet" | "v"
            | "verbose" => {}
            "T" | "threads" => {
                if let Err(msg) = flags.value(&flag) {
                    return usage(&io, tool, &msg).await;
                }
            }
            p if p.len() == 1 && p.as_bytes()[0].is_ascii_digit() => {}
            other => return usage(&io, tool, &Flags::invalid(other)).await,
        }
    }
    for file in flags.operands() {
        if file != "-" {
            io.stderr
                .say(format!("{tool}: {file}: No such file or directory\n"))
                .await;
            return 1;
        }
    }
    let Stdio {
        stdin,
        stdout,
        stderr,
    } = io;
    let result = tokio::task::spawn_blocking(move || {
        let input = BlockingReader::new(stdin);
        let mut output = BlockingWriter(stdout);
        let mut reader: Box<dyn Read> = match (codec, decompress) {
            (Codec::Xz, true) => Box::new(liblzma::read::XzDecoder::new_multi_decoder(input)),
            (Codec::Xz, false) => Box::new(liblzma::read::XzEncoder::new(input, 6)),
            (Codec::Zstd, true) => Box::new(zstd::stream::read::Decoder::new(input)?),
            (Codec::Zstd, false) => Box::new(zstd::stream::read::Encoder::new(input, 3)?),
        };
        io::copy(&mut reader, &mut output).map(|_| ())
    })
    .await;
    match result {
        Ok(Ok(())) => 0,
        Ok(Err(e)) if e.kind() == io::ErrorKind::BrokenPipe => SIGPIPE_STATUS,
        Ok(Err(e)) => {
            stderr
                .say(format!(
                    "{tool}: {}: {}\n",
                    codec.stdin_name(),
                    describe(codec, &e)
                ))
                .await;
            1
        }
        Err(_) => 1,
    }
}

async fn usage(io: &Stdio, tool: &str, msg: &str) -> i32 {
    io.stderr
        .say(format!(
            "{tool}: {msg}\n{tool}: Try `{tool} --help' for more information.\n"
        ))
        .await;
    1
}

/// The tool's own wording for a decoding failure.
fn describe(codec: Codec, e: &io::Error) -> String {
    if let Some(lzma) = e
        .get_ref()
        .and_then(|i| i.downcast_ref::<liblzma::stream::Error>())
    {
        return match lzma {
            liblzma::stream::Error::Format => "File format not recognized",
            liblzma::stream::Error::Data => "Compressed data is corrupt",
            liblzma::stream::Error::Options => "Unsupported options",
            liblzma::stream::Error::MemLimit => "Memory usage limit reached",
            _ => "Internal error (bug)",
        }
        .to_string();
    }
    let text = e.to_string();
    match codec {
        Codec::Xz if e.kind() == io::ErrorKind::UnexpectedEof => "Unexpected end of input".into(),
        Codec::Xz => text,
        Codec::Zstd if text.contains("Unknown frame descriptor") => "unsupported format".into(),
        Codec::Zstd if e.kind() == io::ErrorKind::UnexpectedEof || text.contains("incomplete") => {
            "Read error (39) : premature end".into()
        }
        Codec::Zstd => format!("Decoding error (36) : {text}"),
    }
}

#[cfg(test)]
mod tests {
    use crate::shell::io::{Stdio, collector, input_from};
    use crate::shell::run_line;
    use crate::shell::test_support::env_with;

    async fn run_with_input(line: &str, input: Vec<u8>) -> (i32, Vec<u8>, String) {
        let env = env_with("NVMe", 1 << 20);
        let (stdout, out) = collector();
        let (stderr, err) = collector();
        let status = run_line(
            env,
            line,
            Stdio {
                stdin: input_from(input),
                stdout,
                stderr,
            },
        )
        .await;
        let err = String::from_utf8(err.await.unwrap()).unwrap();
        (status, out.await.unwrap(), err)
    }

    fn payload() -> Vec<u8> {
        (0..300_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect()
    }

    #[tokio::test]
    async fn xz_round_trip() {
        let mut xz = Vec::new();
        liblzma::read::XzEncoder::new(&payload()[..], 1).read_to_end_into(&mut xz);
        for line in ["xz -d", "xz -dc", "xz -d -c -T0", "unxz", "xzcat -"] {
            let (status, out, err) = run_with_input(line, xz.clone()).await;
            assert_eq!((status, err.as_str()), (0, ""), "{line}");
            assert_eq!(out, payload(), "{line}");
        }
        let (status, out, _) = run_with_input("xz | xz -d", payload()).await;
        assert_eq!(status, 0);
        assert_eq!(out, payload());
    }

    #[tokio::test]
    async fn zstd_round_trip() {
        let zst = zstd::stream::encode_all(&payload()[..], 3).unwrap();
        for line in ["zstd -d", "zstd -dc", "zstd -dcq", "unzstd", "zstdcat"] {
            let (status, out, err) = run_with_input(line, zst.clone()).await;
            assert_eq!((status, err.as_str()), (0, ""), "{line}");
            assert_eq!(out, payload(), "{line}");
        }
    }

    #[tokio::test]
    async fn corrupt_and_truncated_input_fail_like_the_tools() {
        let (status, _, err) = run_with_input("xz -d", b"not xz at all".to_vec()).await;
        assert_eq!(
            (status, err.as_str()),
            (1, "xz: (stdin): File format not recognized\n")
        );

        let mut xz = Vec::new();
        liblzma::read::XzEncoder::new(&payload()[..], 1).read_to_end_into(&mut xz);
        let (status, _, err) = run_with_input("xz -d", xz[..xz.len() / 2].to_vec()).await;
        assert_eq!(
            (status, err.as_str()),
            (1, "xz: (stdin): Unexpected end of input\n")
        );

        let (status, _, err) = run_with_input("zstd -d", b"not zstd".to_vec()).await;
        assert_eq!(
            (status, err.as_str()),
            (1, "zstd: /*stdin*\\: unsupported format\n")
        );
        let zst = zstd::stream::encode_all(&payload()[..], 3).unwrap();
        let (status, _, err) = run_with_input("zstd -d", zst[..zst.len() / 2].to_vec()).await;
        assert_eq!(
            (status, err.as_str()),
            (1, "zstd: /*stdin*\\: Read error (39) : premature end\n")
        );

        let (status, _, err) = run_with_input("xz -d image.raw.xz", Vec::new()).await;
        assert_eq!(
            (status, err.as_str()),
            (1, "xz: image.raw.xz: No such file or directory\n")
        );
    }

    trait ReadAll {
        fn read_to_end_into(self, out: &mut Vec<u8>);
    }

    impl<R: std::io::Read> ReadAll for R {
        fn read_to_end_into(mut self, out: &mut Vec<u8>) {
            self.read_to_end(out).unwrap();
        }
    }
}
