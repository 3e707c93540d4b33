//! `lsblk`: the install disk as util-linux prints it (table, `-P` pairs and
//! `-J` JSON), with util-linux's human size format.

use super::{Flags, emit};
use crate::shell::ShellEnv;
use crate::shell::io::Stdio;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Column {
    Name,
    Kname,
    Path,
    MajMin,
    Rm,
    Size,
    Ro,
    Type,
    Mountpoint,
    Mountpoints,
    Model,
    Serial,
    Tran,
    Rota,
}

impl Column {
    fn parse(name: &str) -> Option<Self> {
        Some(match name.to_ascii_uppercase().as_str() {
            "NAME" => Self::Name,
            "KNAME" => Self::Kname,
            "PATH" => Self::Path,
            "MAJ:MIN" => Self::MajMin,
            "RM" => Self::Rm,
            "SIZE" => Self::Size,
            "RO" => Self::Ro,
            "TYPE" => Self::Type,
            "MOUNTPOINT" => Self::Mountpoint,
            "MOUNTPOINTS" => Self::Mountpoints,
            "MODEL" => Self::Model,
            "SERIAL" => Self::Serial,
            "TRAN" => Self::Tran,
            "ROTA" => Self::Rota,
            _ => return None,
        })
    }

    fn header(self) -> &'static str {
        match self {
            Self::Name => "NAME",
            Self::Kname => "KNAME",
            Self::Path => "PATH",
            Self::MajMin => "MAJ:MIN",
            Self::Rm => "RM",
            Self::Size => "SIZE",
            Self::Ro => "RO",
            Self::Type => "TYPE",
            Self::Mountpoint => "MOUNTPOINT",
            Self::Mountpoints => "MOUNTPOINTS",
            Self::Model => "MODEL",
            Self::Serial => "SERIAL",
            Self::Tran => "TRAN",
            Self::Rota => "ROTA",
        }
    }

    fn right_aligned(self) -> bool {
        matches!(self, Self::Rm | Self::Size | Self::Ro | Self::Rota)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Value {
    Text(String),
    Number(u64),
    Bool(bool),
    Null,
}

const DEFAULT_COLUMNS: [Column; 7] = [
    Column::Name,
    Column::MajMin,
    Column::Rm,
    Column::Size,
    Column::Ro,
    Column::Type,
    Column::Mountpoints,
];

#[derive(Default)]
struct Args {
    bytes: bool,
    no_headings: bool,
    paths: bool,
    json: bool,
    pairs: bool,
    columns: Option<Vec<Column>>,
    devices: Vec<String>,
}

pub async fn run(env: &ShellEnv, args: &[String], io: &Stdio) -> i32 {
    let parsed = match parse_args(args) {
        Ok(a) => a,
        Err(msg) => {
            io.stderr
                .say(format!(
                    "lsblk: {msg}\nTry 'lsblk --help' for more information.\n"
                ))
                .await;
            return 1;
        }
    };
    for device in &parsed.devices {
        if *device != env.disk.dev_path() {
            io.stderr
                .say(format!("lsblk: {device}: not a block device\n"))
                .await;
            return 32;
        }
    }
    emit(&io.stdout, render(env, &parsed)).await
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut out = Args::default();
    let mut flags = Flags::new(args);
    while let Some(flag) = flags.next_flag()? {
        match flag.as_str() {
            "b" | "bytes" => out.bytes = true,
            "d" | "nodeps" | "a" | "all" => {}
            "n" | "noheadings" => out.no_headings = true,
            "p" | "paths" => out.paths = true,
            "J" | "json" => out.json = true,
            "P" | "pairs" => out.pairs = true,
            "o" | "output" => {
                let list = flags.value(&flag)?;
                let mut columns = Vec::new();
                for name in list.split(',').filter(|n| !n.is_empty()) {
                    columns.push(Column::parse(name).ok_or(format!("unknown column: {name}"))?);
                }
                out.columns = Some(columns);
            }
            other => return Err(Flags::invalid(other)),
        }
    }
    out.devices = flags.operands();
    Ok(out)
}

fn values(env: &ShellEnv, args: &Args, columns: &[Column]) -> Vec<Value> {
    let m = &env.machine;
    let nvme = m.is_nvme();
    let name = if args.paths {
        env.disk.dev_path()
    } else {
        env.disk.name.clone()
    };
    columns
        .iter()
        .map(|c| match c {
            Column::Name => Value::Text(name.clone()),
            Column::Kname => Value::Text(env.disk.name.clone()),
            Column::Path => Value::Text(env.disk.dev_path()),
            Column::MajMin => Value::Text(if nvme { "259:0" } else { "8:0" }.into()),
            Column::Rm => Value::Bool(false),
            Column::Ro => Value::Bool(false),
            Column::Rota => Value::Bool(m.is_rotational()),
            Column::Size if args.bytes => Value::Number(env.disk.size),
            Column::Size => Value::Text(human_size(env.disk.size)),
            Column::Type => Value::Text("disk".into()),
            Column::Mountpoint | Column::Mountpoints => Value::Null,
            Column::Model => Value::Text(format!("TALOS-SIM {}", m.disk_kind)),
            Column::Serial => Value::Text(m.mac.replace(':', "").to_ascii_uppercase()),
            Column::Tran => Value::Text(if nvme { "nvme" } else { "sata" }.into()),
        })
        .collect()
}

fn render(env: &ShellEnv, args: &Args) -> String {
    let columns = args
        .columns
        .clone()
        .unwrap_or_else(|| DEFAULT_COLUMNS.to_vec());
    let row = values(env, args, &columns);
    if args.json {
        render_json(&columns, &row)
    } else if args.pairs {
        let pairs: Vec<String> = columns
            .iter()
            .zip(&row)
            .map(|(c, v)| format!("{}=\"{}\"", c.header(), plain(v)))
            .collect();
        format!("{}\n", pairs.join(" "))
    } else {
        render_table(&columns, &row, !args.no_headings)
    }
}

fn plain(v: &Value) -> String {
    match v {
        Value::Text(t) => t.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => u8::from(*b).to_string(),
        Value::Null => String::new(),
    }
}

fn render_table(columns: &[Column], row: &[Value], headings: bool) -> String {
    let cells: Vec<String> = row.iter().map(plain).collect();
    let widths: Vec<usize> = columns
        .iter()
        .zip(&cells)
        .map(|(c, v)| {
            if headings {
                v.len().max(c.header().len())
            } else {
                v.len()
            }
        })
        .collect();
    let line = |texts: Vec<&str>| {
        let last = texts.len() - 1;
        let mut out = String::new();
        for (i, (text, col)) in texts.iter().zip(columns).enumerate() {
            if i > 0 {
                out.push(' ');
            }
            if col.right_aligned() {
                out.push_str(&format!("{text:>w$}", w = widths[i]));
            } else if i == last {
                out.push_str(text);
            } else {
                out.push_str(&format!("{text:<w$}", w = widths[i]));
            }
        }
        out.push('\n');
        out
    };
    let mut out = String::new();
    if headings {
        out.push_str(&line(columns.iter().map(|c| c.header()).collect()));
    }
    out.push_str(&line(cells.iter().map(String::as_str).collect()));
    out
}

fn render_json(columns: &[Column], row: &[Value]) -> String {
    let fields: Vec<String> = columns
        .iter()
        .zip(row)
        .map(|(c, v)| {
            let value = match (c, v) {
                (Column::Mountpoints, _) => "[\n               null\n            ]".to_string(),
                (_, Value::Text(t)) => serde_json::to_string(t).unwrap_or_default(),
                (_, Value::Number(n)) => n.to_string(),
                (_, Value::Bool(b)) => b.to_string(),
                (_, Value::Null) => "null".to_string(),
            };
            format!("         \"{}\": {value}", c.header().to_ascii_lowercase())
        })
        .collect();
    format!(
        "{{\n   \"blockdevices\": [\n      {{\n{}\n      }}\n   ]\n}}\n",
        fields.join(",\n")
    )
}

/// util-linux `size_to_human_string` with one-letter suffixes: powers of
/// 1024, one decimal rounded to the nearest tenth, trailing `.0` dropped.
pub fn human_size(bytes: u64) -> String {
    const LETTERS: [&str; 7] = ["B", "K", "M", "G", "T", "P", "E"];
    let mut exp = 0u32;
    while exp < 60 && bytes >= 1u64 << (exp + 10) {
        exp += 10;
    }
    if exp == 0 {
        return format!("{bytes}B");
    }
    let mut whole = bytes >> exp;
    let rem = bytes & ((1u64 << exp) - 1);
    let mut frac = 0u64;
    if rem != 0 {
        let thousandths = ((rem as u128 * 1000) >> exp) as u64;
        frac = (thousandths + 50) / 100;
        if frac == 10 {
            whole += 1;
            frac = 0;
        }
    }
    let letter = LETTERS[(exp / 10) as usize];
    if frac == 0 {
        format!("{whole}{letter}")
    } else {
        format!("{whole}.{frac}{letter}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::test_support::{env_with, run_ok};

    #[test]
    fn human_sizes_match_util_linux() {
        assert_eq!(human_size(1_920_383_410_176), "1.7T");
        assert_eq!(human_size(8 << 20), "8M");
        assert_eq!(human_size(1_024_209_543_168), "953.9G");
        assert_eq!(human_size(512), "512B");
        assert_eq!(human_size((1 << 30) - 1), "1024M");
        assert_eq!(human_size(6_001_175_126_016), "5.5T");
    }

    #[tokio::test]
    async fn names_and_types() {
        let env = env_with("NVMe", 1_920_383_410_176);
        assert_eq!(run_ok(&env, "lsblk -dno NAME,TYPE").await, "nvme0n1 disk\n");
        assert_eq!(
            run_ok(&env, "lsblk -b -dno NAME,SIZE,TYPE").await,
            "nvme0n1 1920383410176 disk\n"
        );
        let sata = env_with("SSD", 1_024_209_543_168);
        assert_eq!(
            run_ok(&sata, "sudo lsblk -bdno NAME,SIZE,TYPE").await,
            "sda 1024209543168 disk\n"
        );
        assert_eq!(run_ok(&sata, "lsblk -dnpo NAME").await, "/dev/sda\n");
    }

    #[tokio::test]
    async fn default_table_has_headings() {
        let env = env_with("NVMe", 1_920_383_410_176);
        assert_eq!(
            run_ok(&env, "lsblk -d").await,
            "NAME    MAJ:MIN RM SIZE RO TYPE MOUNTPOINTS\nnvme0n1 259:0    0 1.7T  0 disk \n"
        );
    }

    #[tokio::test]
    async fn json_and_pairs() {
        let env = env_with("HDD", 6_001_175_126_016);
        assert_eq!(
            run_ok(&env, "lsblk -J -b -d -o NAME,SIZE,TYPE,ROTA").await,
            "{\n   \"blockdevices\": [\n      {\n         \"name\": \"sda\",\n         \"size\": 6001175126016,\n         \"type\": \"disk\",\n         \"rota\": true\n      }\n   ]\n}\n"
        );
        assert_eq!(
            run_ok(&env, "lsblk -P -d -o NAME,SIZE,TYPE").await,
            "NAME=\"sda\" SIZE=\"5.5T\" TYPE=\"disk\"\n"
        );
    }

    #[tokio::test]
    async fn bad_options_and_columns_fail() {
        use crate::shell::test_support::run;
        let env = env_with("NVMe", 1 << 30);
        let (status, _, err) = run(&env, "lsblk -z").await;
        assert_eq!(status, 1);
        assert_eq!(
            err,
            "lsblk: invalid option -- 'z'\nTry 'lsblk --help' for more information.\n"
        );
        let (status, _, err) = run(&env, "lsblk -o NAME,BOGUS").await;
        assert_eq!(status, 1);
        assert!(err.starts_with("lsblk: unknown column: BOGUS\n"));
        let (status, _, err) = run(&env, "lsblk /dev/sdb").await;
        assert_eq!(status, 32);
        assert_eq!(err, "lsblk: /dev/sdb: not a block device\n");
        assert_eq!(
            run_ok(&env, "lsblk -dn /dev/nvme0n1 -o NAME").await,
            "nvme0n1\n"
        );
    }
}
