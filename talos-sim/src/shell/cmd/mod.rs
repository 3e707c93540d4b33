//! The commands of the rescue system. Each prints what the real tool prints
//! for the options it supports and refuses the others the way the tool does.

pub mod codec;
pub mod curl;
pub mod dd;
pub mod ip;
pub mod lsblk;
pub mod tee;
pub mod text;

use super::io::{Output, SIGPIPE_STATUS};

/// Commands that exist on the rescue system (for `sudo`'s lookup).
pub const KNOWN: &[&str] = &[
    "sh",
    "bash",
    "true",
    "false",
    "lsblk",
    "ip",
    "curl",
    "xz",
    "unxz",
    "xzcat",
    "zstd",
    "unzstd",
    "zstdcat",
    "dd",
    "tee",
    "sha256sum",
    "head",
    "cat",
    "echo",
    "uname",
    "sync",
    "blockdev",
];

/// Writes a command's whole output; 0, or the SIGPIPE status if the reader
/// went away.
pub async fn emit(out: &Output, text: String) -> i32 {
    match out.write(text).await {
        Ok(()) => 0,
        Err(_) => SIGPIPE_STATUS,
    }
}

/// GNU getopt-style option parsing: clustered short flags (`-dno NAME`),
/// long flags with `=value` or a separate value, options after operands,
/// and `--`.
pub struct Flags<'a> {
    args: &'a [String],
    next: usize,
    /// Unread characters of the current `-abc` cluster.
    cluster: Vec<char>,
    /// `(name, value)` of a `--name=value` whose value was not read yet.
    long_value: Option<(String, String)>,
    operands: Vec<String>,
}

impl<'a> Flags<'a> {
    pub fn new(args: &'a [String]) -> Self {
        Self {
            args,
            next: 0,
            cluster: Vec::new(),
            long_value: None,
            operands: Vec::new(),
        }
    }

    /// The next option: a one-letter string for short options, the name
    /// without dashes for long ones.
    pub fn next_flag(&mut self) -> Result<Option<String>, String> {
        if let Some((name, _)) = self.long_value.take() {
            return Err(format!("option '--{name}' doesn't allow an argument"));
        }
        if !self.cluster.is_empty() {
            return Ok(Some(self.cluster.remove(0).to_string()));
        }
        while let Some(arg) = self.args.get(self.next) {
            self.next += 1;
            if arg == "--" {
                self.operands.extend(self.args[self.next..].iter().cloned());
                self.next = self.args.len();
                return Ok(None);
            }
            if let Some(long) = arg.strip_prefix("--") {
                return Ok(Some(match long.split_once('=') {
                    Some((name, value)) => {
                        self.long_value = Some((name.to_string(), value.to_string()));
                        name.to_string()
                    }
                    None => long.to_string(),
                }));
            }
            if arg.len() > 1 && arg.starts_with('-') {
                self.cluster = arg[1..].chars().collect();
                return Ok(Some(self.cluster.remove(0).to_string()));
            }
            self.operands.push(arg.clone());
        }
        Ok(None)
    }

    /// The value of the option just returned by `next_flag`.
    pub fn value(&mut self, flag: &str) -> Result<String, String> {
        if let Some((_, v)) = self.long_value.take() {
            return Ok(v);
        }
        if !self.cluster.is_empty() {
            return Ok(std::mem::take(&mut self.cluster).into_iter().collect());
        }
        match self.args.get(self.next) {
            Some(v) => {
                self.next += 1;
                Ok(v.clone())
            }
            None if flag.len() == 1 => Err(format!("option requires an argument -- '{flag}'")),
            None => Err(format!("option '--{flag}' requires an argument")),
        }
    }

    /// Operands seen so far plus the unparsed rest.
    pub fn operands(mut self) -> Vec<String> {
        self.operands.extend(self.args[self.next..].iter().cloned());
        self.operands
    }

    /// getopt's message for an unknown option.
    pub fn invalid(flag: &str) -> String {
        if flag.chars().count() == 1 {
            format!("invalid option -- '{flag}'")
        } else {
            format!("unrecognized option '--{flag}'")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn clustered_and_long_options() {
        let a = args(&[
            "-dno",
            "NAME,TYPE",
            "/dev/sda",
            "--output=SIZE",
            "--bytes",
            "--",
            "-x",
        ]);
        let mut f = Flags::new(&a);
        assert_eq!(f.next_flag().unwrap().as_deref(), Some("d"));
        assert_eq!(f.next_flag().unwrap().as_deref(), Some("n"));
        assert_eq!(f.next_flag().unwrap().as_deref(), Some("o"));
        assert_eq!(f.value("o").unwrap(), "NAME,TYPE");
        assert_eq!(f.next_flag().unwrap().as_deref(), Some("output"));
        assert_eq!(f.value("output").unwrap(), "SIZE");
        assert_eq!(f.next_flag().unwrap().as_deref(), Some("bytes"));
        assert_eq!(f.next_flag().unwrap(), None);
        assert_eq!(f.operands(), args(&["/dev/sda", "-x"]));
    }

    #[test]
    fn attached_values_and_missing_values() {
        let a = args(&["-c1024", "-c"]);
        let mut f = Flags::new(&a);
        assert_eq!(f.next_flag().unwrap().as_deref(), Some("c"));
        assert_eq!(f.value("c").unwrap(), "1024");
        assert_eq!(f.next_flag().unwrap().as_deref(), Some("c"));
        assert_eq!(
            f.value("c").unwrap_err(),
            "option requires an argument -- 'c'"
        );
        assert_eq!(Flags::invalid("q"), "invalid option -- 'q'");
        assert_eq!(Flags::invalid("quiet"), "unrecognized option '--quiet'");
    }
}
