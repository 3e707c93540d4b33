//! A strict parser for the subset of POSIX shell syntax the rescue shell runs:
//! words with quotes and escapes, pipes, `&&`, `||`, `;`, leading `NAME=value`
//! assignments and redirections to `/dev/null` or between stdout and stderr.
//! Anything else (expansions, substitutions, subshells, background jobs,
//! redirections to files) is refused rather than misinterpreted.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connector {
    /// `;` or the start of the script.
    Seq,
    And,
    Or,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    pub items: Vec<(Connector, Pipeline)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pipeline {
    pub commands: Vec<SimpleCommand>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SimpleCommand {
    /// `NAME=value` prefixes; there is no environment to put them in, so
    /// they are accepted and have no effect.
    pub assignments: Vec<(String, String)>,
    pub argv: Vec<String>,
    pub redirects: Vec<Redirect>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirect {
    StdinFromNull,
    StdoutToNull,
    StderrToNull,
    StderrToStdout,
    StdoutToStderr,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("syntax error near unexpected token `{0}'")]
    Unexpected(String),
    #[error("syntax error: unexpected end of file")]
    UnexpectedEnd,
    #[error("unexpected EOF while looking for matching `{0}'")]
    Unterminated(char),
    #[error("{0} is not supported by this rescue shell")]
    Unsupported(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word { text: String, quoted: bool },
    Pipe,
    And,
    Or,
    Semi,
    Redirect(Redirect),
}

impl Token {
    fn display(&self) -> String {
        match self {
            Token::Word { text, .. } => text.clone(),
            Token::Pipe => "|".into(),
            Token::And => "&&".into(),
            Token::Or => "||".into(),
            Token::Semi => ";".into(),
            Token::Redirect(_) => ">".into(),
        }
    }
}

pub fn parse(line: &str) -> Result<Script, ParseError> {
    let tokens = lex(line)?;
    let mut items = Vec::new();
    let mut connector = Connector::Seq;
    let mut pipeline = Pipeline {
        commands: Vec::new(),
    };
    let mut command = SimpleCommand::default();
    let mut expecting_more = false;

    for token in tokens {
        match token {
            Token::Word { text, quoted } => {
                expecting_more = false;
                if command.argv.is_empty()
                    && !quoted
                    && let Some((name, value)) = assignment(&text)
                {
                    command.assignments.push((name, value));
                } else {
                    command.argv.push(text);
                }
            }
            Token::Redirect(r) => command.redirects.push(r),
            op @ (Token::Pipe | Token::And | Token::Or | Token::Semi) => {
                if command.argv.is_empty() {
                    return Err(ParseError::Unexpected(op.display()));
                }
                pipeline.commands.push(std::mem::take(&mut command));
                if op == Token::Pipe {
                    expecting_more = true;
                    continue;
                }
                items.push((
                    connector,
                    std::mem::replace(
                        &mut pipeline,
                        Pipeline {
                            commands: Vec::new(),
                        },
                    ),
                ));
                connector = match op {
                    Token::And => Connector::And,
                    Token::Or => Connector::Or,
                    _ => Connector::Seq,
                };
                expecting_more = connector != Connector::Seq;
            }
        }
    }
    if expecting_more {
        return Err(ParseError::UnexpectedEnd);
    }
    if !command.argv.is_empty() {
        pipeline.commands.push(command);
    } else if !command.assignments.is_empty() || !command.redirects.is_empty() {
        // `FOO=bar` or `>/dev/null` alone: valid shell, does nothing here.
        pipeline.commands.push(SimpleCommand {
            argv: vec!["true".into()],
            ..command
        });
    }
    if !pipeline.commands.is_empty() {
        items.push((connector, pipeline));
    }
    Ok(Script { items })
}

fn assignment(word: &str) -> Option<(String, String)> {
    let (name, value) = word.split_once('=')?;
    let mut chars = name.chars();
    let first = chars.next()?;
    if (first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        Some((name.to_string(), value.to_string()))
    } else {
        None
    }
}

fn unsupported(what: &str) -> ParseError {
    ParseError::Unsupported(what.to_string())
}

/// Whether `$` followed by `next` would start an expansion in a real shell.
fn starts_expansion(next: Option<char>) -> bool {
    matches!(next, Some(c) if c.is_ascii_alphanumeric() || "_{(?@*#!-$".contains(c))
}

fn lex(line: &str) -> Result<Vec<Token>, ParseError> {
    let chars: Vec<char> = line.chars().collect();
    let mut tokens = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quoted = false;
    let mut i = 0;

    macro_rules! end_word {
        () => {
            if in_word {
                tokens.push(Token::Word {
                    text: std::mem::take(&mut word),
                    quoted,
                });
                in_word = false;
                quoted = false;
            }
        };
    }

    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            ' ' | '\t' => end_word!(),
            '\n' => {
                end_word!();
                tokens.push(Token::Semi);
            }
            '#' if !in_word => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            '\'' => {
                in_word = true;
                quoted = true;
                let close = chars[i + 1..]
                    .iter()
                    .position(|&c| c == '\'')
                    .ok_or(ParseError::Unterminated('\''))?;
                word.extend(&chars[i + 1..i + 1 + close]);
                i += close + 2;
                continue;
            }
            '"' => {
                in_word = true;
                quoted = true;
                i += 1;
                loop {
                    let Some(&c) = chars.get(i) else {
                        return Err(ParseError::Unterminated('"'));
                    };
                    match c {
                        '"' => break,
                        '\\' if matches!(chars.get(i + 1), Some('"' | '\\' | '$' | '`')) => {
                            word.push(chars[i + 1]);
                            i += 1;
                        }
                        '\\' if chars.get(i + 1) == Some(&'\n') => i += 1,
                        '$' if starts_expansion(chars.get(i + 1).copied()) => {
                            return Err(unsupported("parameter expansion"));
                        }
                        '`' => return Err(unsupported("command substitution")),
                        c => word.push(c),
                    }
                    i += 1;
                }
            }
            '\\' => match next {
                Some('\n') => i += 1,
                Some(n) => {
                    in_word = true;
                    word.push(n);
                    i += 1;
                }
                None => {}
            },
            '$' if starts_expansion(next) => {
                return Err(unsupported(if next == Some('(') {
                    "command substitution"
                } else {
                    "parameter expansion"
                }));
            }
            '`' => return Err(unsupported("command substitution")),
            '(' | ')' => return Err(unsupported("a subshell")),
            '|' => {
                end_word!();
                match next {
                    Some('|') => {
                        tokens.push(Token::Or);
                        i += 1;
                    }
                    Some('&') => return Err(unsupported("`|&'")),
                    _ => tokens.push(Token::Pipe),
                }
            }
            '&' => {
                end_word!();
                match next {
                    Some('&') => {
                        tokens.push(Token::And);
                        i += 1;
                    }
                    Some('>') => return Err(unsupported("`&>'")),
                    _ => return Err(unsupported("running a command in the background")),
                }
            }
            ';' => {
                end_word!();
                if next == Some(';') {
                    return Err(ParseError::Unexpected(";;".into()));
                }
                tokens.push(Token::Semi);
            }
            '<' | '>' => {
                // A word made only of digits right before the operator is the
                // file descriptor (`2>&1`).
                let fd = if in_word && !quoted && word.chars().all(|c| c.is_ascii_digit()) {
                    let fd = std::mem::take(&mut word);
                    in_word = false;
                    Some(fd)
                } else {
                    end_word!();
                    None
                };
                let (redirect, consumed) = redirection(c, fd.as_deref(), &chars[i + 1..])?;
                tokens.push(Token::Redirect(redirect));
                i += 1 + consumed;
                continue;
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
        i += 1;
    }
    if in_word {
        tokens.push(Token::Word { text: word, quoted });
    }
    Ok(tokens)
}

/// Parses the rest of a redirection after `op`; returns it and the number of
/// characters consumed after the operator.
fn redirection(op: char, fd: Option<&str>, rest: &[char]) -> Result<(Redirect, usize), ParseError> {
    let mut used = 0;
    let mut append = false;
    if op == '>' && rest.first() == Some(&'>') {
        append = true;
        used += 1;
    }
    let dup = rest.get(used) == Some(&'&');
    if dup {
        used += 1;
    }
    while matches!(rest.get(used), Some(' ' | '\t')) {
        used += 1;
    }
    let start = used;
    while let Some(&c) = rest.get(used) {
        if " \t\n;|&<>()".contains(c) {
            break;
        }
        used += 1;
    }
    let target: String = rest[start..used].iter().collect();
    if target.is_empty() {
        let token = rest
            .get(used)
            .map(|c| c.to_string())
            .unwrap_or_else(|| "newline".into());
        return Err(ParseError::Unexpected(token));
    }
    let fd = fd.unwrap_or(if op == '<' { "0" } else { "1" });
    let redirect = match (op, fd, dup, target.as_str()) {
        ('<', "0", false, "/dev/null") => Redirect::StdinFromNull,
        ('>', "1", false, "/dev/null") => Redirect::StdoutToNull,
        ('>', "2", false, "/dev/null") => Redirect::StderrToNull,
        ('>', "2", true, "1") if !append => Redirect::StderrToStdout,
        ('>', "1", true, "2") if !append => Redirect::StdoutToStderr,
        _ => {
            let shown: String = if dup { format!("&{target}") } else { target };
            return Err(ParseError::Unsupported(format!(
                "redirection `{fd}{op}{shown}'"
            )));
        }
    };
    Ok((redirect, used))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argvs(line: &str) -> Vec<(Connector, Vec<Vec<String>>)> {
        parse(line)
            .unwrap()
            .items
            .into_iter()
            .map(|(c, p)| (c, p.commands.into_iter().map(|c| c.argv).collect()))
            .collect()
    }

    fn v(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn pipes_and_lists() {
        assert_eq!(
            argvs(
                "set -o pipefail; curl -fsSL http://x/a.raw.xz | xz -d | dd of=/dev/sda bs=4M && sync"
            ),
            vec![
                (Connector::Seq, vec![v(&["set", "-o", "pipefail"])]),
                (
                    Connector::Seq,
                    vec![
                        v(&["curl", "-fsSL", "http://x/a.raw.xz"]),
                        v(&["xz", "-d"]),
                        v(&["dd", "of=/dev/sda", "bs=4M"])
                    ]
                ),
                (Connector::And, vec![v(&["sync"])]),
            ]
        );
        assert_eq!(
            argvs("false || echo a;echo b"),
            vec![
                (Connector::Seq, vec![v(&["false"])]),
                (Connector::Or, vec![v(&["echo", "a"])]),
                (Connector::Seq, vec![v(&["echo", "b"])]),
            ]
        );
    }

    #[test]
    fn quotes_and_escapes() {
        assert_eq!(
            argvs(r#"echo 'a b' "c \"d\" \$" e\ f 'it''s' "x"y"#),
            vec![(
                Connector::Seq,
                vec![v(&["echo", "a b", "c \"d\" $", "e f", "its", "xy"])]
            )]
        );
        assert_eq!(
            argvs("echo ''"),
            vec![(Connector::Seq, vec![v(&["echo", ""])])]
        );
        assert_eq!(
            argvs("echo a # comment"),
            vec![(Connector::Seq, vec![v(&["echo", "a"])])]
        );
        assert_eq!(
            argvs("echo a#b"),
            vec![(Connector::Seq, vec![v(&["echo", "a#b"])])]
        );
        assert_eq!(
            argvs("echo 'a|b&&c'"),
            vec![(Connector::Seq, vec![v(&["echo", "a|b&&c"])])]
        );
    }

    #[test]
    fn assignments_and_redirects() {
        let script = parse("LC_ALL=C lsblk -dno NAME 2>/dev/null").unwrap();
        let cmd = &script.items[0].1.commands[0];
        assert_eq!(cmd.assignments, vec![("LC_ALL".into(), "C".into())]);
        assert_eq!(cmd.argv, v(&["lsblk", "-dno", "NAME"]));
        assert_eq!(cmd.redirects, vec![Redirect::StderrToNull]);

        let script = parse("dd of=/dev/sda 2>&1 >/dev/null </dev/null").unwrap();
        assert_eq!(
            script.items[0].1.commands[0].redirects,
            vec![
                Redirect::StderrToStdout,
                Redirect::StdoutToNull,
                Redirect::StdinFromNull
            ]
        );
        let script = parse("echo oops >&2").unwrap();
        assert_eq!(
            script.items[0].1.commands[0].redirects,
            vec![Redirect::StdoutToStderr]
        );
        // An assignment after the command name is an argument.
        assert_eq!(
            argvs("dd of=/dev/sda"),
            vec![(Connector::Seq, vec![v(&["dd", "of=/dev/sda"])])]
        );
    }

    #[test]
    fn empty_scripts_are_fine() {
        assert!(parse("").unwrap().items.is_empty());
        assert!(parse("   # nothing").unwrap().items.is_empty());
        assert_eq!(argvs("true;"), vec![(Connector::Seq, vec![v(&["true"])])]);
    }

    #[test]
    fn syntax_errors() {
        assert_eq!(parse("| a"), Err(ParseError::Unexpected("|".into())));
        assert_eq!(parse("a && && b"), Err(ParseError::Unexpected("&&".into())));
        assert_eq!(parse("a |"), Err(ParseError::UnexpectedEnd));
        assert_eq!(parse("a &&"), Err(ParseError::UnexpectedEnd));
        assert_eq!(parse("echo 'abc"), Err(ParseError::Unterminated('\'')));
        assert_eq!(parse("echo \"abc"), Err(ParseError::Unterminated('"')));
        assert_eq!(parse("a ;; b"), Err(ParseError::Unexpected(";;".into())));
        assert_eq!(
            parse("echo >"),
            Err(ParseError::Unexpected("newline".into()))
        );
    }

    #[test]
    fn unsupported_constructs_are_refused() {
        for line in [
            "echo $HOME",
            "echo \"${X}\"",
            "echo $(id)",
            "echo `id`",
            "(cd /tmp)",
            "sleep 1 &",
            "echo hi > /tmp/file",
            "cat < /etc/passwd",
            "echo a |& cat",
            "echo a &> /dev/null",
        ] {
            assert!(
                matches!(parse(line), Err(ParseError::Unsupported(_))),
                "{line} should be refused"
            );
        }
        // A lone `$` is literal in real shells too.
        assert_eq!(
            argvs("echo $ a$"),
            vec![(Connector::Seq, vec![v(&["echo", "$", "a$"])])]
        );
    }
}
