//! Narrowing a Prometheus series selector (a `match[]` of `/federate`) with one more
//! label matcher, so that a tenant's federation job can only ever return that tenant's
//! series however broad the selector it asked for.
//!
//! A small parser of exactly the series-selector grammar: an optional metric name
//! `[a-zA-Z_:][a-zA-Z0-9_:]*`, then optionally `{` matchers `}` where a matcher is
//! `label op string` with op one of `=`, `!=`, `=~`, `!~` and the string in `"…"` or `'…'`
//! (Go escapes) or `` `…` `` (raw). The result is re-rendered canonically with
//! double-quoted strings, so equal selectors render equally.

use std::fmt::Write as _;

/// Why a selector could not be narrowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The selector is not a series selector (with the position of the problem).
    #[error("invalid series selector {selector:?}: {reason} at byte {position}")]
    Syntax {
        /// The selector as given.
        selector: String,
        /// What was wrong.
        reason: String,
        /// Byte offset where parsing stopped.
        position: usize,
    },
    /// The matcher to add has an invalid label name.
    #[error("invalid label name {0:?}")]
    LabelName(String),
    /// The matcher to add has an operator other than `=`, `!=`, `=~`, `!~`.
    #[error("invalid matcher operator {0:?} (one of =, !=, =~, !~)")]
    Operator(String),
}

/// One `label op "value"`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Matcher {
    label: String,
    op: &'static str,
    value: String,
}

/// A parsed series selector.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Selector {
    metric: Option<String>,
    matchers: Vec<Matcher>,
}

/// Checks that `selector` is a series selector the federation can use as a `match[]`:
/// exactly what [`narrow`] accepts, so the hub's admission webhook refuses at `kubectl
/// apply` what the agent could not render later, with the same message.
pub fn check_selector(selector: &str) -> Result<(), SelectorError> {
    Parser::new(selector).selector().map(|_| ())
}

/// Adds `label="value"` to a Prometheus series selector (`name`, `name{...}`, `{...}`);
/// existing matchers are kept (they are ANDed).
pub fn narrow(selector: &str, label: &str, value: &str) -> Result<String, SelectorError> {
    narrow_with(selector, label, "=", value)
}

/// Adds `label op "value"` to a Prometheus series selector, e.g.
/// `narrow_with(sel, "tenant", "=~", "a|b")`; existing matchers are kept.
pub fn narrow_with(
    selector: &str,
    label: &str,
    op: &str,
    value: &str,
) -> Result<String, SelectorError> {
    if !is_label_name(label) {
        return Err(SelectorError::LabelName(label.to_owned()));
    }
    let op = canonical_op(op).ok_or_else(|| SelectorError::Operator(op.to_owned()))?;
    let mut parsed = Parser::new(selector).selector()?;
    parsed.matchers.push(Matcher {
        label: label.to_owned(),
        op,
        value: value.to_owned(),
    });
    Ok(render(&parsed))
}

fn canonical_op(op: &str) -> Option<&'static str> {
    ["=", "!=", "=~", "!~"].into_iter().find(|o| *o == op)
}

fn is_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn render(selector: &Selector) -> String {
    let mut out = selector.metric.clone().unwrap_or_default();
    out.push('{');
    for (i, m) in selector.matchers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&m.label);
        out.push_str(m.op);
        quote_into(&mut out, &m.value);
    }
    out.push('}');
    out
}

/// Writes `value` as a PromQL double-quoted string.
fn quote_into(out: &mut String, value: &str) {
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

struct Parser<'a> {
    input: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(input: &'a str) -> Self {
        Self { input, pos: 0 }
    }

    fn error(&self, reason: impl Into<String>) -> SelectorError {
        SelectorError::Syntax {
            selector: self.input.to_owned(),
            reason: reason.into(),
            position: self.pos,
        }
    }

    fn peek(&self) -> Option<char> {
        self.input[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }

    fn selector(&mut self) -> Result<Selector, SelectorError> {
        self.skip_space();
        let metric = match self.peek() {
            Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                Some(self.identifier(true))
            }
            _ => None,
        };
        self.skip_space();
        let mut matchers = Vec::new();
        if self.peek() == Some('{') {
            self.bump();
            matchers = self.matchers()?;
        } else if metric.is_none() {
            return Err(self.error(match self.peek() {
                None => "empty selector".to_owned(),
                Some(c) => format!("expected a metric name or '{{', found {c:?}"),
            }));
        }
        self.skip_space();
        if let Some(c) = self.peek() {
            return Err(self.error(format!(
                "unexpected {c:?} after the selector (only a series selector is allowed)"
            )));
        }
        Ok(Selector { metric, matchers })
    }

    fn identifier(&mut self, metric: bool) -> String {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || (metric && c == ':'))
        {
            self.bump();
        }
        self.input[start..self.pos].to_owned()
    }

    /// After `{`: `matcher (, matcher)* ,? }`.
    fn matchers(&mut self) -> Result<Vec<Matcher>, SelectorError> {
        let mut matchers = Vec::new();
        loop {
            self.skip_space();
            match self.peek() {
                Some('}') => {
                    self.bump();
                    return Ok(matchers);
                }
                Some(c) if c.is_ascii_alphabetic() || c == '_' => {}
                Some(c) => return Err(self.error(format!("expected a label name, found {c:?}"))),
                None => return Err(self.error("missing '}'")),
            }
            let label = self.identifier(false);
            self.skip_space();
            let op = self.operator()?;
            self.skip_space();
            let value = self.string()?;
            matchers.push(Matcher { label, op, value });
            self.skip_space();
            match self.bump() {
                Some(',') => {}
                Some('}') => return Ok(matchers),
                Some(c) => return Err(self.error(format!("expected ',' or '}}', found {c:?}"))),
                None => return Err(self.error("missing '}'")),
            }
        }
    }

    fn operator(&mut self) -> Result<&'static str, SelectorError> {
        let rest = &self.input[self.pos..];
        // Longest first: "=~" before "=".
        for op in ["=~", "!~", "!=", "="] {
            if rest.starts_with(op) {
                self.pos += op.len();
                return Ok(op);
            }
        }
        Err(self.error("expected one of =, !=, =~, !~"))
    }

    fn string(&mut self) -> Result<String, SelectorError> {
        let quote = match self.bump() {
            Some(q @ ('"' | '\'' | '`')) => q,
            Some(c) => return Err(self.error(format!("expected a quoted string, found {c:?}"))),
            None => return Err(self.error("expected a quoted string")),
        };
        let mut value = String::new();
        loop {
            match self.bump() {
                None => return Err(self.error("unterminated string")),
                Some(c) if c == quote => return Ok(value),
                Some('\\') if quote != '`' => value.push(self.escape(quote)?),
                Some('\n') if quote != '`' => return Err(self.error("newline in string")),
                Some(c) => value.push(c),
            }
        }
    }

    /// After a backslash in a `"` or `'` string: Go's escapes.
    fn escape(&mut self, quote: char) -> Result<char, SelectorError> {
        let c = self
            .bump()
            .ok_or_else(|| self.error("unterminated escape"))?;
        Ok(match c {
            'a' => '\u{7}',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\u{b}',
            '\\' => '\\',
            c if c == quote => c,
            'x' => self.code_point(2, 16)?,
            'u' => self.code_point(4, 16)?,
            'U' => self.code_point(8, 16)?,
            '0'..='7' => {
                self.pos -= 1;
                let c = self.code_point(3, 8)?;
                if u32::from(c) > 255 {
                    return Err(self.error("octal escape above \\377"));
                }
                c
            }
            c => return Err(self.error(format!("unknown escape \\{c}"))),
        })
    }

    fn code_point(&mut self, digits: usize, radix: u32) -> Result<char, SelectorError> {
        let text = self
            .input
            .get(self.pos..self.pos + digits)
            .filter(|t| t.chars().all(|c| c.is_digit(radix)))
            .ok_or_else(|| self.error(format!("escape needs {digits} digits")))?;
        let value = u32::from_str_radix(text, radix).map_err(|e| self.error(e.to_string()))?;
        let c = char::from_u32(value).ok_or_else(|| self.error("escape is not a code point"))?;
        self.pos += digits;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(selector: &str) -> String {
        narrow(selector, "namespace", "team-a").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_bare_metric_name_gets_braces_with_the_matcher() {
        assert_eq!(ns("up"), r#"up{namespace="team-a"}"#);
        assert_eq!(
            ns("  job:rate5m:sum "),
            r#"job:rate5m:sum{namespace="team-a"}"#
        );
    }

    #[test]
    fn existing_matchers_are_kept_and_rendered_canonically() {
        assert_eq!(
            ns(r#"{__name__=~".+"}"#),
            r#"{__name__=~".+",namespace="team-a"}"#
        );
        assert_eq!(
            ns(r#"http_requests_total{ job = 'api' , code!~`5..`, }"#),
            r#"http_requests_total{job="api",code!~"5..",namespace="team-a"}"#
        );
        assert_eq!(ns("up{}"), r#"up{namespace="team-a"}"#);
    }

    #[test]
    fn a_selector_naming_another_namespace_still_gets_the_tenant_matcher() {
        // Both matchers must hold, so the narrowed selector matches nothing: the tenant can
        // never reach another tenant's series.
        assert_eq!(
            ns(r#"{namespace="team-b"}"#),
            r#"{namespace="team-b",namespace="team-a"}"#
        );
    }

    #[test]
    fn go_escapes_are_decoded_and_re_rendered_in_double_quotes() {
        assert_eq!(
            ns(r#"m{a="x\"y\\z\n",b='it\'s',c="\x41\u00e9\101",d=`raw\n`}"#),
            r#"m{a="x\"y\\z\n",b="it's",c="AéA",d="raw\\n",namespace="team-a"}"#
        );
    }

    #[test]
    fn the_value_to_add_is_escaped() {
        assert_eq!(
            narrow_with("up", "tenant", "=~", "a|b\"c").unwrap(),
            r#"up{tenant=~"a|b\"c"}"#
        );
        assert_eq!(narrow("up", "tenant", "").unwrap(), r#"up{tenant=""}"#);
        assert_eq!(
            narrow_with("up", "tenant", "!=", "").unwrap(),
            r#"up{tenant!=""}"#
        );
    }

    #[test]
    fn anything_but_a_series_selector_is_refused_with_a_clear_message() {
        for bad in [
            "",
            "   ",
            "rate(up[5m])",
            "up[5m]",
            "up offset 5m",
            "up{job=\"a\"",
            "up{job=a}",
            "up{job~\"a\"}",
            "up{job=\"a\" code=\"b\"}",
            "{=\"a\"}",
            "up{job=\"\\q\"}",
            "up{job=\"unterminated}",
            "sum by (job) (up)",
            "1",
            "{__name__=\"a\"} or up",
        ] {
            let err = narrow(bad, "namespace", "t").unwrap_err();
            let SelectorError::Syntax { selector, .. } = &err else {
                panic!("{bad:?}: {err:?}");
            };
            assert_eq!(selector, bad);
            assert!(err.to_string().contains("invalid series selector"), "{err}");
        }
    }

    #[test]
    fn checking_accepts_what_narrowing_accepts_and_refuses_with_the_same_error() {
        for selector in [
            "up",
            r#"{job="a"}"#,
            "up{}",
            r#"m{a=~`x`, b!="y",}"#,
            "{job=}",
            "",
            "up[5m]",
        ] {
            assert_eq!(
                check_selector(selector),
                narrow(selector, "namespace", "t").map(|_| ()),
                "{selector:?}"
            );
        }
        assert_eq!(
            check_selector("{job=}").unwrap_err().to_string(),
            r#"invalid series selector "{job=}": expected a quoted string, found '}' at byte 6"#
        );
    }

    #[test]
    fn a_bad_label_or_operator_to_add_is_refused() {
        assert_eq!(
            narrow("up", "1abc", "x"),
            Err(SelectorError::LabelName("1abc".into()))
        );
        assert_eq!(
            narrow_with("up", "tenant", "==", "x"),
            Err(SelectorError::Operator("==".into()))
        );
    }

    #[test]
    fn narrowing_is_idempotent_on_its_own_output_format() {
        let once = ns(r#"up{job='a'}"#);
        let reparsed = Parser::new(&once).selector().unwrap();
        assert_eq!(render(&reparsed), once);
    }
}
