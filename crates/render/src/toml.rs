//! The CN config as the Go operator holds and prints it (reference §3).
//!
//! Go keeps the config as a `map[string]interface{}` and prints it with
//! go-toml v1 (no indentation, alphabetical, plain keys before tables). What
//! the printed text looks like depends on the Go types inside the map, so the
//! value model keeps the distinctions that change it: a table array written
//! `[[x]]` versus a plain array printed inline, and the string-only table the
//! operator uses for `cache`, which a merge replaces instead of merging.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

/// A TOML table: keys in byte order, as go-toml's alphabetical order is.
pub type Table = BTreeMap<String, TomlValue>;

#[derive(Clone, Debug, PartialEq)]
pub enum TomlValue {
    String(String),
    Integer(i64),
    Float(f64),
    Boolean(bool),
    /// A TOML date or time, kept as written.
    Datetime(String),
    /// A plain array (Go `[]interface{}` or `[]string`), printed inline.
    Array(Vec<TomlValue>),
    /// A table (Go `map[string]interface{}`).
    Table(Table),
    /// An array of tables (Go `[]map[string]interface{}`), printed `[[key]]`.
    TableArray(Vec<Table>),
    /// The operator's `map[string]string` (fileservice `cache`): printed as a
    /// table, but a deep merge replaces it whole.
    StringTable(BTreeMap<String, String>),
}

/// Why the user's `config` could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("spec.template.config is not valid TOML ({reason}): write it as TOML text or as an object of TOML keys")]
    Toml { reason: String },
    #[error("spec.template.config must be TOML text or an object of TOML keys, not {found}")]
    Shape { found: &'static str },
}

/// Reads the user's `config` the way Go's `TomlConfig.UnmarshalJSON` does:
/// a string is TOML text; an object is JSON, whose numbers are all floats in
/// Go (so `6002` prints back as `6002.0`) and whose arrays stay plain arrays.
pub fn parse_config(config: &Value) -> Result<Table, ConfigError> {
    match config {
        Value::Null => Ok(Table::new()),
        Value::String(text) => parse_toml_text(text),
        Value::Object(map) => Ok(json_table(map)),
        Value::Bool(_) => Err(ConfigError::Shape { found: "a boolean" }),
        Value::Number(_) => Err(ConfigError::Shape { found: "a number" }),
        Value::Array(_) => Err(ConfigError::Shape { found: "an array" }),
    }
}

fn json_table(map: &serde_json::Map<String, Value>) -> Table {
    map.iter().filter_map(|(key, value)| json_value(value).map(|value| (key.clone(), value))).collect()
}

fn json_value(value: &Value) -> Option<TomlValue> {
    Some(match value {
        // A nil interface in the map is skipped by go-toml.
        Value::Null => return None,
        Value::Bool(flag) => TomlValue::Boolean(*flag),
        Value::Number(number) => TomlValue::Float(number.as_f64().unwrap_or(f64::NAN)),
        Value::String(text) => TomlValue::String(text.clone()),
        Value::Array(items) => TomlValue::Array(items.iter().filter_map(json_value).collect()),
        Value::Object(map) => TomlValue::Table(json_table(map)),
    })
}

fn parse_toml_text(text: &str) -> Result<Table, ConfigError> {
    let document = text
        .parse::<toml_edit::DocumentMut>()
        .map_err(|error| ConfigError::Toml { reason: error.message().trim().to_owned() })?;
    Ok(toml_table(document.as_table()))
}

fn toml_table(table: &toml_edit::Table) -> Table {
    table.iter().filter_map(|(key, item)| toml_item(item).map(|value| (key.to_owned(), value))).collect()
}

fn toml_inline_table(table: &toml_edit::InlineTable) -> Table {
    table.iter().map(|(key, value)| (key.to_owned(), toml_value(value))).collect()
}

fn toml_item(item: &toml_edit::Item) -> Option<TomlValue> {
    match item {
        toml_edit::Item::None => None,
        toml_edit::Item::Value(value) => Some(toml_value(value)),
        toml_edit::Item::Table(table) => Some(TomlValue::Table(toml_table(table))),
        toml_edit::Item::ArrayOfTables(tables) => Some(TomlValue::TableArray(tables.iter().map(toml_table).collect())),
    }
}

fn toml_value(value: &toml_edit::Value) -> TomlValue {
    match value {
        toml_edit::Value::String(text) => TomlValue::String(text.value().clone()),
        toml_edit::Value::Integer(number) => TomlValue::Integer(*number.value()),
        toml_edit::Value::Float(number) => TomlValue::Float(*number.value()),
        toml_edit::Value::Boolean(flag) => TomlValue::Boolean(*flag.value()),
        toml_edit::Value::Datetime(datetime) => TomlValue::Datetime(datetime.value().to_string()),
        toml_edit::Value::InlineTable(table) => TomlValue::Table(toml_inline_table(table)),
        toml_edit::Value::Array(items) => {
            // go-toml v1 reads an array whose items are all inline tables as an
            // array of tables, the same as `[[key]]`.
            let tables: Option<Vec<Table>> = items
                .iter()
                .map(|item| match item {
                    toml_edit::Value::InlineTable(table) => Some(toml_inline_table(table)),
                    _ => None,
                })
                .collect();
            match tables {
                Some(tables) if !tables.is_empty() => TomlValue::TableArray(tables),
                _ => TomlValue::Array(items.iter().map(toml_value).collect()),
            }
        }
    }
}

/// Go's `deepMergeMap(base, override)`: tables merge recursively, arrays of
/// tables whose first entry has `name` merge by name (override entries first,
/// in override order, unmatched base entries after), anything else: override
/// wins.
pub fn deep_merge(base: &Table, overrides: &Table) -> Table {
    let mut result = base.clone();
    for (key, value) in overrides {
        let merged = match (result.get(key), value) {
            (Some(TomlValue::Table(base)), TomlValue::Table(over)) => TomlValue::Table(deep_merge(base, over)),
            (Some(base), over) => match (named_tables(base), named_tables(over)) {
                (Some(base), Some(over)) => TomlValue::TableArray(merge_named(&base, &over)),
                _ => over.clone(),
            },
            (None, over) => over.clone(),
        };
        result.insert(key.clone(), merged);
    }
    result
}

/// The entries of an array of tables whose first entry has a `name` key.
fn named_tables(value: &TomlValue) -> Option<Vec<Table>> {
    let tables: Vec<Table> = match value {
        TomlValue::TableArray(tables) => tables.clone(),
        TomlValue::Array(items) => items
            .iter()
            .map(|item| match item {
                TomlValue::Table(table) => Some(table.clone()),
                _ => None,
            })
            .collect::<Option<_>>()?,
        _ => return None,
    };
    tables.first().filter(|first| first.contains_key("name"))?;
    Some(tables)
}

fn entry_name(table: &Table) -> Option<&str> {
    match table.get("name") {
        Some(TomlValue::String(name)) => Some(name),
        _ => None,
    }
}

fn merge_named(base: &[Table], overrides: &[Table]) -> Vec<Table> {
    let mut matched = vec![false; base.len()];
    let mut result = Vec::with_capacity(base.len() + overrides.len());
    for over in overrides {
        // Go indexes the base by name; a repeated name maps to its last entry.
        let found = entry_name(over)
            .filter(|name| !name.is_empty())
            .and_then(|name| base.iter().rposition(|entry| entry_name(entry) == Some(name)));
        match found {
            Some(index) => {
                result.push(deep_merge(&base[index], over));
                matched[index] = true;
            }
            None => result.push(over.clone()),
        }
    }
    result.extend(base.iter().zip(matched).filter(|(_, matched)| !matched).map(|(entry, _)| entry.clone()));
    result
}

/// Go's `TomlConfig.Set`: sets the key at `path`, turning any non-table on
/// the way into a table.
pub fn set(table: &mut Table, path: &[&str], value: TomlValue) {
    let Some((last, parents)) = path.split_last() else { return };
    let mut current = table;
    for key in parents {
        let entry = current.entry((*key).to_owned()).or_insert_with(|| TomlValue::Table(Table::new()));
        if !matches!(entry, TomlValue::Table(_)) {
            *entry = TomlValue::Table(Table::new());
        }
        let TomlValue::Table(next) = entry else { return };
        current = next;
    }
    current.insert((*last).to_owned(), value);
}

/// The text go-toml v1 writes for `table` with indentation "" and
/// alphabetical order.
pub fn to_go_toml(table: &Table) -> String {
    let mut out = String::new();
    write_table(table, "", &mut out);
    out
}

fn is_complex(value: &TomlValue) -> bool {
    matches!(value, TomlValue::Table(_) | TomlValue::TableArray(_) | TomlValue::StringTable(_))
}

fn write_table(table: &Table, keyspace: &str, out: &mut String) {
    for (key, value) in table.iter().filter(|(_, value)| !is_complex(value)) {
        let _ = writeln!(out, "{} = {}", quote_key(key), inline(value));
    }
    for (key, value) in table.iter().filter(|(_, value)| is_complex(value)) {
        let path = if keyspace.is_empty() { quote_key(key) } else { format!("{keyspace}.{}", quote_key(key)) };
        match value {
            TomlValue::Table(sub) => {
                let _ = write!(out, "\n[{path}]\n");
                write_table(sub, &path, out);
            }
            TomlValue::StringTable(sub) => {
                let _ = write!(out, "\n[{path}]\n");
                let sub: Table = sub.iter().map(|(k, v)| (k.clone(), TomlValue::String(v.clone()))).collect();
                write_table(&sub, &path, out);
            }
            TomlValue::TableArray(entries) => {
                for entry in entries {
                    let _ = write!(out, "\n[[{path}]]\n");
                    write_table(entry, &path, out);
                }
            }
            _ => {}
        }
    }
}

/// A value on one line, as go-toml's `tomlValueStringRepresentation`.
fn inline(value: &TomlValue) -> String {
    match value {
        TomlValue::String(text) => format!("\"{}\"", escape(text)),
        TomlValue::Integer(number) => number.to_string(),
        TomlValue::Float(number) => go_float(*number),
        TomlValue::Boolean(flag) => flag.to_string(),
        TomlValue::Datetime(text) => text.clone(),
        TomlValue::Array(items) => format!("[{}]", items.iter().map(inline).collect::<Vec<_>>().join(", ")),
        TomlValue::TableArray(entries) => format!(
            "[{}]",
            entries.iter().map(|entry| inline(&TomlValue::Table(entry.clone()))).collect::<Vec<_>>().join(", ")
        ),
        TomlValue::Table(table) => {
            // Inline tables list plain keys first too.
            let (simple, complex): (Vec<_>, Vec<_>) = table.iter().partition(|(_, value)| !is_complex(value));
            let parts: Vec<String> = simple
                .into_iter()
                .chain(complex)
                .map(|(key, value)| format!("{} = {}", quote_key(key), inline(value)))
                .collect();
            format!("{{ {} }}", parts.join(", "))
        }
        TomlValue::StringTable(table) => {
            inline(&TomlValue::Table(table.iter().map(|(k, v)| (k.clone(), TomlValue::String(v.clone()))).collect()))
        }
    }
}

/// go-toml v1 float text: 32-bit precision when the value fits exactly, one
/// decimal for whole numbers, lower case.
fn go_float(number: f64) -> String {
    if number.is_nan() {
        return "nan".into();
    }
    if number.is_infinite() {
        return if number > 0.0 { "+inf".into() } else { "-inf".into() };
    }
    if number.trunc() == number {
        return format!("{number:.1}");
    }
    #[allow(clippy::cast_possible_truncation)] // checked: the round trip is exact
    let narrow = number as f32;
    if f64::from(narrow) == number { narrow.to_string() } else { number.to_string() }
}

fn quote_key(key: &str) -> String {
    let bare = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    // go-toml v1 leaves an empty key bare as well.
    if bare || key.is_empty() { key.to_owned() } else { format!("\"{}\"", escape(key)) }
}

/// go-toml v1's `encodeTomlString`, quirks included: control characters are
/// compared after truncating the rune to 16 bits, and 0x1F is not escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            #[allow(clippy::cast_possible_truncation)] // the truncation is go-toml's
            c if (c as u32 as u16) < 0x1f => {
                let _ = write!(out, "\\u{:04X}", c as u32 as u16);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> Table {
        parse_config(&Value::String(text.into())).unwrap()
    }

    #[test]
    fn plain_keys_come_before_tables_and_everything_is_alphabetical() {
        let text = to_go_toml(&table("z = 1\n[b]\nx = \"y\"\n[a]\nk = true\n"));
        assert_eq!(text, "z = 1\n\n[a]\nk = true\n\n[b]\nx = \"y\"\n");
    }

    #[test]
    fn object_config_numbers_print_as_floats_like_go() {
        let config = serde_json::json!({"cn": {"port-base": 6002, "ratio": 0.5, "big": 0.1}});
        let text = to_go_toml(&parse_config(&config).unwrap());
        assert_eq!(text, "\n[cn]\nbig = 0.1\nport-base = 6002.0\nratio = 0.5\n");
    }

    #[test]
    fn arrays_of_tables_from_text_print_as_table_arrays_but_from_objects_inline() {
        let from_text = to_go_toml(&table("x = [{a = 1}, {a = 2}]"));
        assert_eq!(from_text, "\n[[x]]\na = 1\n\n[[x]]\na = 2\n");
        let from_object = to_go_toml(&parse_config(&serde_json::json!({"x": [{"a": "b"}]})).unwrap());
        assert_eq!(from_object, "x = [{ a = \"b\" }]\n");
    }

    #[test]
    fn keys_outside_the_bare_set_are_quoted() {
        assert_eq!(to_go_toml(&table("\"a.b\" = \"c\\n\"")), "\"a.b\" = \"c\\n\"\n");
    }

    #[test]
    fn set_replaces_a_scalar_parent_with_a_table() {
        let mut config = table("cn = 1");
        set(&mut config, &["cn", "role"], TomlValue::String("TP".into()));
        assert_eq!(to_go_toml(&config), "\n[cn]\nrole = \"TP\"\n");
    }

    #[test]
    fn named_entries_merge_by_name_operator_first_user_extras_after() {
        let user = table(
            "[[fileservice]]\nname = \"EXTRA\"\n[[fileservice]]\nname = \"S3\"\nbackend = \"X\"\nlog = true\n[fileservice.cache]\nmemory-capacity = \"9GiB\"\n",
        );
        let mut operator_s3 = Table::new();
        operator_s3.insert("name".into(), TomlValue::String("S3".into()));
        operator_s3.insert("backend".into(), TomlValue::String("S3".into()));
        operator_s3.insert("cache".into(), TomlValue::StringTable([("memory-capacity".into(), "1B".into())].into()));
        let mut operator = Table::new();
        operator.insert("fileservice".into(), TomlValue::TableArray(vec![operator_s3]));
        let merged = deep_merge(&user, &operator);
        let text = to_go_toml(&merged);
        assert_eq!(
            text,
            "\n[[fileservice]]\nbackend = \"S3\"\nlog = true\nname = \"S3\"\n\n[fileservice.cache]\nmemory-capacity = \"1B\"\n\n[[fileservice]]\nname = \"EXTRA\"\n"
        );
    }

    #[test]
    fn invalid_toml_names_the_field() {
        let err = parse_config(&Value::String("a = ".into())).unwrap_err();
        assert!(err.to_string().contains("spec.template.config"), "{err}");
        assert!(parse_config(&serde_json::json!(3)).is_err());
    }
}
