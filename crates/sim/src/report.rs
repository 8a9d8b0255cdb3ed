//! `--report DIR`: one seed as an HTML page with an SVG timeline — a row
//! per pod colored by the claim that owns it over time, reconciles and
//! operator writes per interval beneath, violations marked in red.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use cnpool_api::labels;
use cnpool_apiserver::{Event, EventType};
use serde_json::Value;

use crate::checker::{OwnerLabel, Violation};

/// A stretch of a pod's life in one state.
#[derive(Clone, Debug)]
struct Segment {
    from: Duration,
    to: Option<Duration>,
    phase: String,
    /// The owning claim's name while Bound.
    owner: Option<String>,
}

/// Pods' states over time, from the commit stream.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    pods: BTreeMap<String, Vec<Segment>>,
    /// The label that is the controllers' lock (the legacy model writes no `claim-uid`).
    owner_label: OwnerLabel,
}

impl Timeline {
    pub fn new(owner_label: OwnerLabel) -> Self {
        Self { pods: BTreeMap::new(), owner_label }
    }

    pub fn commit(&mut self, event: &Event, now: Duration) {
        if event.storage.plural != "pods" {
            return;
        }
        let object = &event.object;
        let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str) else { return };
        let label = |key: &str| {
            object.pointer("/metadata/labels").and_then(|l| l.get(key)).and_then(Value::as_str).map(str::to_owned)
        };
        let owner_label = self.owner_label;
        let segments = self.pods.entry(name.to_owned()).or_default();
        let open = segments.last_mut().filter(|segment| segment.to.is_none());
        if event.event_type == EventType::Deleted {
            if let Some(segment) = open {
                segment.to = Some(now);
            }
            return;
        }
        let deleting = object.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null());
        let phase = if deleting { "Deleting".to_owned() } else { label(labels::PHASE).unwrap_or_default() };
        let owner = owner_label.owner(object).and(label(labels::CLAIMED_BY));
        if let Some(segment) = open {
            if segment.phase == phase && segment.owner == owner {
                return;
            }
            segment.to = Some(now);
        }
        segments.push(Segment { from: now, to: None, phase, owner });
    }
}

/// What the page shows besides the timeline.
pub struct Page<'a> {
    pub title: &'a str,
    pub end: Duration,
    pub timeline: &'a Timeline,
    pub violations: &'a [Violation],
    pub reconciles: &'a [Duration],
    pub writes: &'a [Duration],
}

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 110.0;
/// Room right of the time axis for half of its last label, which is
/// centred on its gridline.
const RIGHT: f64 = 20.0;
const ROW: f64 = 14.0;
const CHART: f64 = 70.0;
const BUCKETS: usize = 240;

/// A stable color per claim name.
fn claim_color(name: &str) -> String {
    let hash = name.bytes().fold(0x811c_9dc5_u32, |hash, byte| (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193));
    // FNV's low bits vary little between names like tenant-001 and
    // tenant-002: mix them before taking a hue.
    format!("hsl({}, 65%, 55%)", (hash.wrapping_mul(0x9E37_79B1) >> 16) % 360)
}

fn phase_color(phase: &str) -> &'static str {
    match phase {
        "Idle" => "#d9e6d9",
        "Draining" => "#9a9a9a",
        "Terminating" | "Deleting" => "#444",
        _ => "#f2f2f2",
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Counts of `times` per interval of the run.
fn histogram(times: &[Duration], end: Duration) -> Vec<usize> {
    let mut buckets = vec![0; BUCKETS];
    let span = end.as_secs_f64().max(1.0);
    for at in times {
        let index = ((at.as_secs_f64() / span) * BUCKETS as f64) as usize;
        buckets[index.min(BUCKETS - 1)] += 1;
    }
    buckets
}

impl Page<'_> {
    fn x(&self, at: Duration) -> f64 {
        LEFT + at.as_secs_f64() / self.end.as_secs_f64().max(1.0) * (WIDTH - LEFT - RIGHT)
    }

    fn chart(&self, svg: &mut String, top: f64, title: &str, times: &[Duration], color: &str) {
        let counts = histogram(times, self.end);
        let most = counts.iter().copied().max().unwrap_or(0).max(1);
        let per = self.end.as_secs_f64() / BUCKETS as f64;
        let _ = writeln!(svg, r#"<text x="4" y="{:.1}" class="label">{title}</text>"#, top + CHART / 2.0);
        let _ = writeln!(
            svg,
            r#"<text x="4" y="{:.1}" class="small">max {most} per {per:.0}s</text>"#,
            top + CHART / 2.0 + 12.0
        );
        let bar = (WIDTH - LEFT - RIGHT) / BUCKETS as f64;
        for (index, count) in counts.iter().enumerate().filter(|(_, count)| **count > 0) {
            let height = *count as f64 / most as f64 * CHART;
            let _ = writeln!(
                svg,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.2}" height="{height:.1}" fill="{color}"><title>{count} in {:.0}s–{:.0}s</title></rect>"#,
                LEFT + index as f64 * bar,
                top + CHART - height,
                bar.max(1.0),
                index as f64 * per,
                (index + 1) as f64 * per
            );
        }
    }

    /// The whole HTML page.
    pub fn render(&self) -> String {
        let rows = self.timeline.pods.len() as f64;
        let charts_top = 30.0 + rows * ROW + 20.0;
        let height = charts_top + 2.0 * (CHART + 20.0) + 20.0;
        let mut svg = String::new();
        let _ = writeln!(svg, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0}">"#);
        let minutes = (self.end.as_secs() / 60).max(1);
        let step = [5, 10, 15, 30, 60].into_iter().find(|step| minutes / step <= 12).unwrap_or(120);
        for minute in (0..=minutes).step_by(step as usize) {
            let x = self.x(Duration::from_secs(minute * 60));
            let _ = writeln!(svg, r##"<line x1="{x:.1}" y1="20" x2="{x:.1}" y2="{height:.0}" stroke="#eee"/>"##);
            let _ = writeln!(
                svg,
                r#"<text x="{x:.1}" y="14" class="small" text-anchor="middle">{}:{:02}</text>"#,
                minute / 60,
                minute % 60
            );
        }
        for (row, (pod, segments)) in self.timeline.pods.iter().enumerate() {
            let y = 30.0 + row as f64 * ROW;
            let _ = writeln!(svg, r#"<text x="4" y="{:.1}" class="label">{}</text>"#, y + ROW - 4.0, escape(pod));
            for segment in segments {
                let from = self.x(segment.from);
                let to = self.x(segment.to.unwrap_or(self.end));
                let fill = match &segment.owner {
                    Some(owner) => claim_color(owner),
                    None => phase_color(&segment.phase).to_owned(),
                };
                let what = match &segment.owner {
                    Some(owner) => format!("{} {}", segment.phase, owner),
                    None => segment.phase.clone(),
                };
                let _ = writeln!(
                    svg,
                    r#"<rect x="{from:.1}" y="{y:.1}" width="{:.2}" height="{:.1}" fill="{fill}"><title>{pod}: {} from {:.0}s</title></rect>"#,
                    (to - from).max(0.5),
                    ROW - 2.0,
                    escape(&what),
                    segment.from.as_secs_f64()
                );
            }
        }
        self.chart(&mut svg, charts_top, "reconciles", self.reconciles, "#4a78c2");
        self.chart(&mut svg, charts_top + CHART + 20.0, "operator writes", self.writes, "#c2784a");
        for violation in self.violations {
            let x = self.x(Duration::from_secs_f64(violation.at_seconds));
            let _ = writeln!(
                svg,
                r#"<line x1="{x:.1}" y1="20" x2="{x:.1}" y2="{height:.0}" stroke="red" stroke-width="2"><title>{:?}: {}</title></line>"#,
                violation.invariant,
                escape(&violation.detail)
            );
        }
        svg.push_str("</svg>\n");
        let mut list = String::new();
        for violation in self.violations {
            let _ = writeln!(
                list,
                "<li>{:.1}s <b>{:?}</b> {}</li>",
                violation.at_seconds,
                violation.invariant,
                escape(&violation.detail)
            );
        }
        if list.is_empty() {
            list.push_str("<li>none</li>");
        }
        format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>\n<style>\
             body{{font-family:sans-serif;margin:16px}} .label{{font-size:11px}} .small{{font-size:9px;fill:#666}}\
             </style></head>\n<body><h1>{title}</h1>\n<p>Rows are pods, colored by the claim that owns them \
             (hover for the claim); gray shades are Idle, Draining and Terminating; red lines are violations.</p>\n\
             {svg}<h2>Violations</h2><ul>{list}</ul></body></html>\n",
            title = escape(self.title)
        )
    }
}

#[cfg(test)]
mod tests {
    use cnpool_apiserver::StorageKey;
    use serde_json::json;

    use super::*;
    use crate::checker::Invariant;

    fn pod(name: &str, phase: &str, owner: Option<&str>) -> Event {
        let mut labels = json!({ "pool.matrixorigin.io/phase": phase });
        if let Some(owner) = owner {
            labels["pool.matrixorigin.io/claim-uid"] = json!(format!("uid-{owner}"));
            labels["pool.matrixorigin.io/claimed-by"] = json!(owner);
        }
        let object = json!({"metadata": {"name": name, "namespace": "default", "labels": labels}});
        Event::new(1, StorageKey { group: String::new(), plural: "pods".into() }, EventType::Modified, None, object)
    }

    #[test]
    fn the_page_draws_each_pod_in_its_owners_color_and_marks_violations() {
        let mut timeline = Timeline::default();
        timeline.commit(&pod("cn-0", "Idle", None), Duration::from_secs(0));
        timeline.commit(&pod("cn-0", "Bound", Some("tenant-a")), Duration::from_secs(60));
        timeline.commit(&pod("cn-1", "Idle", None), Duration::from_secs(10));
        let violation =
            Violation { invariant: Invariant::I1, at_seconds: 90.0, detail: "claims a and b both Bound".into() };
        let page = Page {
            title: "seed 1",
            end: Duration::from_secs(120),
            timeline: &timeline,
            violations: std::slice::from_ref(&violation),
            reconciles: &[Duration::from_secs(1)],
            writes: &[Duration::from_secs(2)],
        };
        let html = page.render();
        assert!(html.contains(">cn-0</text>") && html.contains(">cn-1</text>"));
        assert!(html.contains(&claim_color("tenant-a")), "the bound stretch has the claim's color");
        assert!(html.contains("Bound tenant-a from 60s"));
        assert!(html.contains(r#"stroke="red""#) && html.contains("claims a and b both Bound"));
    }
}
