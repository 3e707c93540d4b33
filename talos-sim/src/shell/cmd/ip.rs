//! `ip link` (iproute2): the loopback and the server's NIC `eth0`, whose MAC
//! is derived from the server id.

use super::emit;
use crate::shell::ShellEnv;
use crate::shell::io::Stdio;

pub async fn run(env: &ShellEnv, args: &[String], io: &Stdio) -> i32 {
    let mut oneline = false;
    let mut rest = args;
    while let Some(first) = rest.first().filter(|a| a.starts_with('-')) {
        match first.as_str() {
            "-o" | "-oneline" | "--oneline" => oneline = true,
            // Address family filters do not change link output.
            "-4" | "-6" | "-0" => {}
            other => {
                io.stderr
                    .say(format!(
                        "Option \"{other}\" is unknown, try \"ip -help\".\n"
                    ))
                    .await;
                return 255;
            }
        }
        rest = &rest[1..];
    }
    let Some(object) = rest.first() else {
        io.stderr
            .say("Usage: ip [ OPTIONS ] OBJECT { COMMAND | help }\n")
            .await;
        return 255;
    };
    if !(object.len() <= 4 && "link".starts_with(object.as_str())) {
        let msg = if ["address", "route", "neighbour", "rule"]
            .iter()
            .any(|o| o.starts_with(object.as_str()))
        {
            format!(
                "ip: only `ip link` is available in this rescue image (asked for `ip {object}`)\n"
            )
        } else {
            format!("Object \"{object}\" is unknown, try \"ip help\".\n")
        };
        io.stderr.say(msg).await;
        return 1;
    }
    let mut dev = None;
    let mut words = rest[1..].iter().map(String::as_str);
    match words.next() {
        None | Some("show" | "list" | "ls" | "lst" | "sh") => {}
        Some(other) => {
            io.stderr
                .say(format!(
                    "ip: `ip link {other}` is not available in this rescue image\n"
                ))
                .await;
            return 1;
        }
    }
    while let Some(word) = words.next() {
        dev = Some(
            if word == "dev" {
                words.next().unwrap_or("")
            } else {
                word
            }
            .to_string(),
        );
    }
    let links = links(env);
    let selected: Vec<&Link> = match &dev {
        Some(name) => links.iter().filter(|l| l.name == *name).collect(),
        None => links.iter().collect(),
    };
    if selected.is_empty() {
        let name = dev.unwrap_or_default();
        io.stderr
            .say(format!("Device \"{name}\" does not exist.\n"))
            .await;
        return 1;
    }
    let mut out = String::new();
    for link in selected {
        let sep = if oneline { "\\" } else { "\n" };
        out.push_str(&format!(
            "{}: {}: <{}> mtu {} qdisc {} state {} mode DEFAULT group default qlen 1000{sep}    link/{} {} brd {}\n",
            link.index, link.name, link.flags, link.mtu, link.qdisc, link.state, link.kind, link.mac, link.brd
        ));
    }
    emit(&io.stdout, out).await
}

struct Link {
    index: u32,
    name: &'static str,
    flags: &'static str,
    mtu: u32,
    qdisc: &'static str,
    state: &'static str,
    kind: &'static str,
    mac: String,
    brd: &'static str,
}

fn links(env: &ShellEnv) -> Vec<Link> {
    vec![
        Link {
            index: 1,
            name: "lo",
            flags: "LOOPBACK,UP,LOWER_UP",
            mtu: 65536,
            qdisc: "noqueue",
            state: "UNKNOWN",
            kind: "loopback",
            mac: "00:00:00:00:00:00".into(),
            brd: "00:00:00:00:00:00",
        },
        Link {
            index: 2,
            name: "eth0",
            flags: "BROADCAST,MULTICAST,UP,LOWER_UP",
            mtu: 1500,
            qdisc: "mq",
            state: "UP",
            kind: "ether",
            mac: env.machine.mac.clone(),
            brd: "ff:ff:ff:ff:ff:ff",
        },
    ]
}

#[cfg(test)]
mod tests {
    use crate::shell::test_support::{env_with, run, run_ok};

    #[tokio::test]
    async fn oneline_link_listing() {
        let env = env_with("NVMe", 1 << 30);
        let mac = env.machine.mac.clone();
        assert_eq!(
            run_ok(&env, "ip -o link").await,
            format!(
                "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n\
                 2: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc mq state UP mode DEFAULT group default qlen 1000\\    link/ether {mac} brd ff:ff:ff:ff:ff:ff\n"
            )
        );
    }

    #[tokio::test]
    async fn multiline_and_single_device() {
        let env = env_with("NVMe", 1 << 30);
        let mac = env.machine.mac.clone();
        assert_eq!(
            run_ok(&env, "ip link show dev eth0").await,
            format!(
                "2: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc mq state UP mode DEFAULT group default qlen 1000\n    link/ether {mac} brd ff:ff:ff:ff:ff:ff\n"
            )
        );
        let (status, _, err) = run(&env, "ip -o link show eth9").await;
        assert_eq!(
            (status, err.as_str()),
            (1, "Device \"eth9\" does not exist.\n")
        );
        let (status, _, err) = run(&env, "ip -x link").await;
        assert_eq!(
            (status, err.as_str()),
            (255, "Option \"-x\" is unknown, try \"ip -help\".\n")
        );
        let (status, _, err) = run(&env, "ip bogus").await;
        assert_eq!(
            (status, err.as_str()),
            (1, "Object \"bogus\" is unknown, try \"ip help\".\n")
        );
    }
}
