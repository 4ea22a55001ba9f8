//! Chat templates rendered in Rust: a Hugging Face Jinja chat template (the
//! GGUF's `tokenizer.chat_template`, or a file named by `[engine]
//! chat_template`) turned into the prompt text with `minijinja`, the way
//! transformers' `apply_chat_template` renders it with Python's jinja2.
//!
//! The engine uses this only for templates llama.cpp's built-in matcher
//! does not recognise; these functions are pure and need no model.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, ValueKind};
use minijinja::{context, Environment, Error, ErrorKind, Value};

use super::Message;

/// The value of `[engine] chat_template` that takes the GGUF's own template.
pub const AUTO: &str = "auto";

/// The name the template is compiled under inside its environment; shown in
/// minijinja's error messages.
const TEMPLATE_NAME: &str = "chat_template";

/// Why a chat template could not be read, compiled or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("cannot read the chat template file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a tokenizer_config.json with a `chat_template` string: {message} (give a .jinja file or a JSON object whose `chat_template` holds the template)")]
    Config { path: PathBuf, message: String },
    #[error("cannot compile the chat template (Jinja syntax): {0:#}")]
    Compile(Error),
    #[error("cannot render the chat template: {0:#}")]
    Render(Error),
}

/// What `[engine] chat_template` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateSetting {
    /// The GGUF's `tokenizer.chat_template`.
    Auto,
    /// A llama.cpp built-in template name (`chatml`, `llama3`, `gemma`, ...).
    Name(String),
    /// A file holding a Jinja template, or a tokenizer_config.json with one.
    File(PathBuf),
}

impl TemplateSetting {
    /// Reads the setting: `auto`; a path when the value names an existing
    /// file, has a path separator or a template file's extension (`.jinja`,
    /// `.j2`, `.json`, `.txt`); otherwise a llama.cpp template name.
    pub fn parse(value: &str) -> TemplateSetting {
        let value = value.trim();
        if value == AUTO || value.is_empty() {
            return TemplateSetting::Auto;
        }
        let path = Path::new(value);
        let has_template_extension = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "jinja" | "j2" | "json" | "txt"));
        if path.is_file() || value.contains('/') || value.contains('\\') || has_template_extension {
            TemplateSetting::File(path.to_path_buf())
        } else {
            TemplateSetting::Name(value.to_string())
        }
    }
}

/// The Jinja template held by `path`: the file's text, or, for a `.json`
/// file (a Hugging Face tokenizer_config.json), its `chat_template` field
/// (a string, or a list of `{name, template}` of which `default` is taken).
pub fn read_template_file(path: &Path) -> Result<String, ChatError> {
    let text = std::fs::read_to_string(path).map_err(|source| ChatError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if path.extension().and_then(|e| e.to_str()) != Some("json") {
        return Ok(text);
    }
    let config_err = |message: &str| ChatError::Config {
        path: path.to_path_buf(),
        message: message.to_string(),
    };
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| config_err(&e.to_string()))?;
    match json.get("chat_template") {
        Some(serde_json::Value::String(template)) => Ok(template.clone()),
        Some(serde_json::Value::Array(named)) => named
            .iter()
            .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
            .and_then(|t| t.get("template"))
            .and_then(|t| t.as_str())
            .map(str::to_string)
            .ok_or_else(|| config_err("its `chat_template` list has no template named `default`")),
        Some(_) => Err(config_err(
            "its `chat_template` is neither a string nor a list",
        )),
        None => Err(config_err("it has no `chat_template` field")),
    }
}

/// A compiled Jinja chat template with the model's BOS and EOS texts.
pub struct JinjaTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
}

impl std::fmt::Debug for JinjaTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JinjaTemplate")
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish_non_exhaustive()
    }
}

impl JinjaTemplate {
    /// Compiles `source` as transformers does: blocks trimmed
    /// (`trim_blocks`, `lstrip_blocks`), `break`/`continue`, Python's string
    /// and dict methods, `raise_exception` and a Python-style `tojson`.
    pub fn new(source: &str, bos: &str, eos: &str) -> Result<JinjaTemplate, ChatError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(ChatError::Compile)?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", tojson);
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(ChatError::Compile)?;
        Ok(JinjaTemplate {
            env,
            bos: bos.to_string(),
            eos: eos.to_string(),
        })
    }

    /// Renders `messages` ready for the assistant's reply
    /// (`add_generation_prompt`), with `strftime_now` reading the clock.
    pub fn render(&self, messages: &[Message]) -> Result<String, ChatError> {
        self.render_at(messages, SystemTime::now())
    }

    /// [`JinjaTemplate::render`] with `strftime_now` answering for the
    /// instant `now` (UTC), so that a rendering can be reproduced.
    pub fn render_at(&self, messages: &[Message], now: SystemTime) -> Result<String, ChatError> {
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(ChatError::Render)?;
        let messages: Vec<Value> = messages
            .iter()
            .map(|m| {
                context! {
                    role => m.role.as_str(),
                    content => m.content.as_str(),
                }
            })
            .collect();
        let seconds = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let strftime_now = Value::from_function(move |format: &str| strftime(format, seconds));
        template
            .render(context! {
                messages => messages,
                add_generation_prompt => true,
                bos_token => self.bos.as_str(),
                eos_token => self.eos.as_str(),
                strftime_now => strftime_now,
            })
            .map_err(ChatError::Render)
    }
}

/// Renders `messages` with the Jinja chat template `template`, ready for the
/// assistant's reply, as transformers' `apply_chat_template` does.
pub fn render(
    template: &str,
    messages: &[Message],
    bos: &str,
    eos: &str,
) -> Result<String, ChatError> {
    JinjaTemplate::new(template, bos, eos)?.render(messages)
}

/// The templates' `raise_exception(message)`: fails the rendering with the
/// template's own message.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// transformers' `tojson` filter: Python's `json.dumps` with
/// `ensure_ascii=False` unless asked, `indent`, `separators` and
/// `sort_keys` as in Python, and no HTML escaping.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    let sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_string()),
            None => Some(" ".repeat(usize::try_from(v)?)),
        },
    };
    let (item_sep, key_sep) = match separators.as_deref() {
        Some([item, key]) => (item.clone(), key.clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators must be a pair (item separator, key separator)",
            ))
        }
        None if indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let style = JsonStyle {
        indent,
        item_sep,
        key_sep,
        ensure_ascii,
        sort_keys,
    };
    let mut out = String::new();
    write_json(&mut out, value, &style, 0)?;
    Ok(Value::from_safe_string(out))
}

struct JsonStyle {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    ensure_ascii: bool,
    sort_keys: bool,
}

fn write_json(
    out: &mut String,
    value: &Value,
    style: &JsonStyle,
    depth: usize,
) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => match value.as_i64().filter(|_| value.is_integer()) {
            Some(i) => {
                let _ = write!(out, "{i}");
            }
            None => {
                let f = f64::try_from(value.clone())?;
                if !f.is_finite() {
                    out.push_str(if f.is_nan() {
                        "NaN"
                    } else if f > 0.0 {
                        "Infinity"
                    } else {
                        "-Infinity"
                    });
                } else if f.fract() == 0.0 && f.abs() < 1e16 {
                    let _ = write!(out, "{f:.1}");
                } else {
                    let _ = write!(out, "{f}");
                }
            }
        },
        ValueKind::String | ValueKind::Bytes => {
            write_json_string(out, value.as_str().unwrap_or_default(), style.ensure_ascii)
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(out, '[', ']', items.len(), style, depth, |out, i| {
                write_json(out, &items[i], style, depth + 1)
            })?;
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = value.try_iter()?.collect();
            if style.sort_keys {
                keys.sort();
            }
            write_container(out, '{', '}', keys.len(), style, depth, |out, i| {
                let key = &keys[i];
                match key.as_str() {
                    Some(s) => write_json_string(out, s, style.ensure_ascii),
                    None => write_json_string(out, &key.to_string(), style.ensure_ascii),
                }
                out.push_str(&style.key_sep);
                write_json(out, &value.get_item(key)?, style, depth + 1)
            })?;
        }
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: cannot serialize a value of kind {}", value.kind()),
            ))
        }
    }
    Ok(())
}

fn write_container(
    out: &mut String,
    open: char,
    close: char,
    len: usize,
    style: &JsonStyle,
    depth: usize,
    mut item: impl FnMut(&mut String, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if len == 0 {
        out.push(close);
        return Ok(());
    }
    for i in 0..len {
        if i > 0 {
            out.push_str(&style.item_sep);
        }
        if let Some(indent) = &style.indent {
            out.push('\n');
            out.push_str(&indent.repeat(depth + 1));
        }
        item(out, i)?;
    }
    if let Some(indent) = &style.indent {
        out.push('\n');
        out.push_str(&indent.repeat(depth));
    }
    out.push(close);
    Ok(())
}

/// A JSON string as Python's `json.dumps` writes it.
fn write_json_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !c.is_ascii()) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// The civil date (year, month 1–12, day 1–31) of a day counted from
/// 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, usize, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as usize;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days from 1970-01-01 to the civil date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Python's `datetime.strftime` for the instant `seconds` after the Unix
/// epoch (UTC), with the directives chat templates use: `%Y %y %m %d %e %B
/// %b %A %a %H %M %S %j %%`; any other fails the rendering.
fn strftime(format: &str, seconds: i64) -> Result<String, Error> {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let day_of_year = days - days_from_civil(year, 1, 1) + 1;
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday.
    let month_name = MONTHS[month - 1];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => {
                let _ = write!(out, "{year}");
            }
            Some('y') => {
                let _ = write!(out, "{:02}", year.rem_euclid(100));
            }
            Some('m') => {
                let _ = write!(out, "{month:02}");
            }
            Some('d') => {
                let _ = write!(out, "{day:02}");
            }
            Some('e') => {
                let _ = write!(out, "{day:>2}");
            }
            Some('B') => out.push_str(month_name),
            Some('b') => out.push_str(&month_name[..3]),
            Some('A') => out.push_str(WEEKDAYS[weekday]),
            Some('a') => out.push_str(&WEEKDAYS[weekday][..3]),
            Some('H') => {
                let _ = write!(out, "{:02}", secs / 3600);
            }
            Some('M') => {
                let _ = write!(out, "{:02}", secs / 60 % 60);
            }
            Some('S') => {
                let _ = write!(out, "{:02}", secs % 60);
            }
            Some('j') => {
                let _ = write!(out, "{day_of_year:03}");
            }
            Some('%') => out.push('%'),
            other => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "strftime_now: unsupported directive %{} in {format:?}",
                        other.map(String::from).unwrap_or_default()
                    ),
                ))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/chat_templates")
    }

    fn fixture_messages() -> Result<Vec<Message>, Box<dyn std::error::Error>> {
        let text = std::fs::read_to_string(fixtures().join("messages.json"))?;
        Ok(serde_json::from_str(&text)?)
    }

    /// 2024-07-26 12:00:00 UTC, the instant the fixture generator pins
    /// `strftime_now` to.
    fn pinned() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_721_995_200)
    }

    #[test]
    fn hf_templates_render_as_jinja2_does() -> TestResult {
        #[derive(serde::Deserialize)]
        struct Case {
            template: String,
            bos_token: String,
            eos_token: String,
            expected: String,
        }
        let messages = fixture_messages()?;
        assert_eq!(messages.len(), 4);
        let cases: Vec<Case> =
            serde_json::from_str(&std::fs::read_to_string(fixtures().join("cases.json"))?)?;
        let names: Vec<&str> = cases.iter().map(|c| c.template.as_str()).collect();
        assert_eq!(
            names,
            [
                "qwen2.5-instruct.jinja",
                "llama3.1-instruct.jinja",
                "deepseek-coder-v2-instruct.jinja",
                "gemma3-it.jinja"
            ]
        );
        for case in cases {
            let source = std::fs::read_to_string(fixtures().join(&case.template))?;
            let expected = std::fs::read_to_string(fixtures().join(&case.expected))?;
            let template = JinjaTemplate::new(&source, &case.bos_token, &case.eos_token)?;
            let rendered = template.render_at(&messages, pinned())?;
            assert_eq!(rendered, expected, "{}", case.template);
            // The clock only matters to templates that call strftime_now.
            assert_eq!(template.render(&messages)?, expected, "{}", case.template);
        }
        Ok(())
    }

    #[test]
    fn template_errors_are_reported() -> TestResult {
        let gemma = std::fs::read_to_string(fixtures().join("gemma3-it.jinja"))?;
        let two_users = [Message::user("a"), Message::user("b")];
        let err = render(&gemma, &two_users, "<bos>", "<eos>")
            .err()
            .ok_or("two user turns in a row must be refused")?;
        assert!(matches!(err, ChatError::Render(_)), "{err:?}");
        assert!(
            err.to_string()
                .contains("Conversation roles must alternate user/assistant/user/assistant/..."),
            "{err}"
        );
        let err = JinjaTemplate::new("{% for m in messages %}", "", "")
            .err()
            .ok_or("an unclosed block must not compile")?;
        assert!(matches!(err, ChatError::Compile(_)), "{err:?}");
        Ok(())
    }

    #[test]
    fn chatml_template_renders_a_conversation() -> TestResult {
        // The ChatML template as HF ships it for models that have no other.
        let chatml = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
        let messages = [Message::system("Be brief."), Message::user("Hi")];
        assert_eq!(
            render(chatml, &messages, "<s>", "</s>")?,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        Ok(())
    }

    #[test]
    fn python_methods_loop_controls_and_tokens() -> TestResult {
        let cases: [(&str, &str); 6] = [
            ("{{ messages[0].content.strip() }}", "hello  world"),
            ("{{ messages[0].content.split()|join(',') }}", "hello,world"),
            ("{{ messages[0]['content'].startswith('  hello') }}", "True"),
            (
                "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.role }}{% endfor %}",
                "user",
            ),
            ("{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}", "<s>|</s>|True"),
            (
                "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
                "2",
            ),
        ];
        let messages = [Message::user("  hello  world\n"), Message::assistant("ok")];
        for (template, expected) in cases {
            assert_eq!(
                render(template, &messages, "<s>", "</s>")?,
                expected,
                "{template}"
            );
        }
        Ok(())
    }

    #[test]
    fn tojson_writes_what_python_json_dumps_writes() -> TestResult {
        let value = "{'name': 'get_weather', 'parameters': {'city': 'Zürich \"x\"\n', 'n': [1, 2.0, true, none], 'e': {}}}";
        // Expected strings are Python's json.dumps(value, ensure_ascii=False),
        // with indent=4, and with ensure_ascii=True.
        let cases: [(&str, &str); 4] = [
            (
                "",
                "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Zürich \\\"x\\\"\\n\", \"n\": [1, 2.0, true, null], \"e\": {}}}",
            ),
            (
                "(indent=4)",
                "{\n    \"name\": \"get_weather\",\n    \"parameters\": {\n        \"city\": \"Zürich \\\"x\\\"\\n\",\n        \"n\": [\n            1,\n            2.0,\n            true,\n            null\n        ],\n        \"e\": {}\n    }\n}",
            ),
            (
                "(ensure_ascii=true)",
                "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Z\\u00fcrich \\\"x\\\"\\n\", \"n\": [1, 2.0, true, null], \"e\": {}}}",
            ),
            (
                "(separators=[',', ':'], sort_keys=true)",
                "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Zürich \\\"x\\\"\\n\",\"e\":{},\"n\":[1,2.0,true,null]}}",
            ),
        ];
        for (args, expected) in cases {
            let template = format!("{{{{ {value} | tojson{args} }}}}");
            assert_eq!(render(&template, &[], "", "")?, expected, "tojson{args}");
        }
        Ok(())
    }

    #[test]
    fn strftime_now_formats_like_python() -> TestResult {
        // Python: datetime(2024, 7, 26, 12, 0, 5).strftime(...), and
        // datetime(2000, 2, 29, 23, 59, 59).
        let cases: [(u64, &str, &str); 3] = [
            (1_721_995_205, "%d %b %Y", "26 Jul 2024"),
            (
                1_721_995_205,
                "%Y-%m-%d %H:%M:%S|%A %a %B %j %y %%",
                "2024-07-26 12:00:05|Friday Fri July 208 24 %",
            ),
            (951_868_799, "%d %b %Y|%A|%j", "29 Feb 2000|Tuesday|060"),
        ];
        let template = JinjaTemplate::new("{{ strftime_now(messages[0].content) }}", "", "")?;
        for (seconds, format, expected) in cases {
            let at = UNIX_EPOCH + Duration::from_secs(seconds);
            assert_eq!(
                template.render_at(&[Message::user(format)], at)?,
                expected,
                "{format}"
            );
        }
        let err = template
            .render_at(&[Message::user("%Q")], pinned())
            .err()
            .ok_or("an unknown directive must fail")?;
        assert!(
            err.to_string().contains("unsupported directive %Q"),
            "{err}"
        );
        Ok(())
    }

    #[test]
    fn settings_are_auto_a_name_or_a_file() -> TestResult {
        let dir = tempfile::tempdir()?;
        let bare = dir.path().join("mytemplate");
        std::fs::write(&bare, "{{ 'x' }}")?;
        let bare_text = bare.display().to_string();
        let cases: [(&str, TemplateSetting); 8] = [
            ("auto", TemplateSetting::Auto),
            ("", TemplateSetting::Auto),
            ("chatml", TemplateSetting::Name("chatml".into())),
            ("llama3", TemplateSetting::Name("llama3".into())),
            ("deepseek2", TemplateSetting::Name("deepseek2".into())),
            (
                "templates/qwen.jinja",
                TemplateSetting::File("templates/qwen.jinja".into()),
            ),
            (
                "tokenizer_config.json",
                TemplateSetting::File("tokenizer_config.json".into()),
            ),
            (bare_text.as_str(), TemplateSetting::File(bare.clone())),
        ];
        for (value, expected) in cases {
            assert_eq!(TemplateSetting::parse(value), expected, "{value:?}");
        }
        Ok(())
    }

    #[test]
    fn template_files_and_tokenizer_configs_are_read() -> TestResult {
        let dir = tempfile::tempdir()?;
        let write = |name: &str, text: &str| -> Result<PathBuf, std::io::Error> {
            let path = dir.path().join(name);
            std::fs::write(&path, text)?;
            Ok(path)
        };
        let jinja = write("t.jinja", "{{ bos_token }}\n")?;
        assert_eq!(read_template_file(&jinja)?, "{{ bos_token }}\n");
        let config = write(
            "tokenizer_config.json",
            r#"{"bos_token": "<s>", "chat_template": "{{ bos_token }}hi"}"#,
        )?;
        assert_eq!(read_template_file(&config)?, "{{ bos_token }}hi");
        let named = write(
            "named.json",
            r#"{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}"#,
        )?;
        assert_eq!(read_template_file(&named)?, "D");
        let cases: [(&str, &str); 3] = [
            ("none.json", r#"{"bos_token": "<s>"}"#),
            ("number.json", r#"{"chat_template": 3}"#),
            ("broken.json", "{"),
        ];
        for (name, text) in cases {
            let path = write(name, text)?;
            let err = read_template_file(&path)
                .err()
                .ok_or(format!("{name} must be refused"))?;
            assert!(matches!(err, ChatError::Config { .. }), "{name}: {err:?}");
        }
        let err = read_template_file(&dir.path().join("missing.jinja"))
            .err()
            .ok_or("a missing file must be refused")?;
        assert!(matches!(err, ChatError::Read { .. }), "{err:?}");
        Ok(())
    }
}
