//! A case's result: a titled table for the terminal, the same cells as JSON.

use serde::Serialize;

#[derive(Serialize)]
pub struct Table {
    /// The case, as `cnpool bench` names it.
    pub case: String,
    pub title: String,
    pub columns: Vec<String>,
    pub rows: Vec<Vec<serde_json::Value>>,
    /// Lines printed under the table: what was measured, targets missed.
    pub notes: Vec<String>,
    /// The case's figures that have a target, for `cnpool bench all`'s
    /// summary.
    pub checks: Vec<Check>,
}

/// A figure held to a target.
#[derive(Clone, Serialize)]
pub struct Check {
    pub measure: String,
    pub value: serde_json::Value,
    pub target: String,
    pub met: bool,
}

impl Table {
    pub fn new(case: &str, title: &str, columns: &[&str]) -> Self {
        Self {
            case: case.to_owned(),
            title: title.to_owned(),
            columns: columns.iter().map(|column| (*column).to_owned()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
            checks: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<serde_json::Value>) {
        self.rows.push(cells);
    }

    pub fn note(&mut self, line: impl Into<String>) {
        self.notes.push(line.into());
    }

    /// Records that `value` of `measure` is held to `target`; the row
    /// showing it is the case's own.
    pub fn check(&mut self, measure: &str, value: serde_json::Value, target: String, met: bool) {
        self.checks.push(Check { measure: measure.to_owned(), value, target, met });
    }

    /// The table with right-aligned columns as wide as their widest cell;
    /// floats with one decimal (whole ones without).
    pub fn render(&self) -> String {
        let cells: Vec<Vec<String>> = self.rows.iter().map(|row| row.iter().map(cell_text).collect()).collect();
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|index| {
                let widest = cells.iter().filter_map(|row| row.get(index)).map(|cell| cell.chars().count()).max();
                widest.unwrap_or(0).max(self.columns[index].chars().count())
            })
            .collect();
        let line = |row: &[String]| {
            let padded: Vec<String> =
                row.iter().zip(&widths).map(|(cell, width)| format!("{cell:>width$}", width = *width)).collect();
            padded.join("  ")
        };
        let mut text = format!("{}: {}\n{}\n", self.case, self.title, line(&self.columns));
        for row in &cells {
            text.push_str(&line(row));
            text.push('\n');
        }
        for note in &self.notes {
            text.push_str(&format!("  {note}\n"));
        }
        text
    }

    pub fn print(&self) {
        println!("\n{}", self.render());
    }
}

fn cell_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Number(number) => match number.as_f64() {
            Some(float) if number.is_f64() && float.fract() == 0.0 => format!("{float:.0}"),
            Some(float) if number.is_f64() => format!("{float:.1}"),
            _ => number.to_string(),
        },
        serde_json::Value::Null => "—".to_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let mut table = Table::new("b0", "a case", &["what", "n"]);
        table.row(vec![json!("writes"), json!(12345)]);
        table.row(vec![json!("binds/s"), json!(2000.0)]);
        table.row(vec![json!("rate"), json!(2.75)]);
        table.row(vec![json!("missing"), serde_json::Value::Null]);
        let text = table.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "b0: a case");
        assert_eq!(lines[1], "   what      n");
        assert_eq!(lines[2], " writes  12345");
        assert_eq!(lines[3], "binds/s   2000");
        assert_eq!(lines[4], "   rate    2.8");
        assert_eq!(lines[5], "missing      —");
    }
}
