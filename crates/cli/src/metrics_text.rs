//! Reading a Prometheus text exposition (the operator's `/metrics`, the
//! kube-apiserver's, or a registry encoded in-process): the samples of one
//! family, their labels and values.

/// A Prometheus text exposition.
pub struct Metrics(pub String);

/// Write verbs as the operator's request counter names them, and as the
/// kube-apiserver's `apiserver_request_total` does (upper case, APPLY for
/// server-side apply).
const WRITE_VERBS: [&str; 7] = ["create", "update", "patch", "delete", "post", "put", "apply"];

impl Metrics {
    /// The samples of `name`: their labels and values.
    pub fn samples<'a>(&'a self, name: &'a str) -> impl Iterator<Item = (Labels<'a>, f64)> + 'a {
        self.0.lines().filter_map(move |line| {
            let (labels, value) = line.strip_prefix(name)?.strip_prefix('{')?.rsplit_once('}')?;
            Some((Labels(labels), value.split_whitespace().next()?.parse::<f64>().ok()?))
        })
    }

    /// The samples of `name` that count write requests (by their `verb`).
    pub fn write_samples<'a>(&'a self, name: &'a str) -> impl Iterator<Item = (Labels<'a>, f64)> + 'a {
        self.samples(name).filter(|(labels, _)| {
            labels.get("verb").is_some_and(|verb| WRITE_VERBS.iter().any(|write| write.eq_ignore_ascii_case(verb)))
        })
    }

    /// The sum of every sample of `name`.
    pub fn total(&self, name: &str) -> f64 {
        self.samples(name).map(|(_, value)| value).sum()
    }

    /// Write requests counted in `name`.
    pub fn writes(&self, name: &str) -> f64 {
        self.write_samples(name).map(|(_, value)| value).sum()
    }
}

/// The inside of a sample's `{…}`.
pub struct Labels<'a>(&'a str);

impl Labels<'_> {
    pub fn get(&self, key: &str) -> Option<&str> {
        let start = self.0.find(&format!("{key}=\""))? + key.len() + 2;
        let length = self.0[start..].find('"')?;
        Some(&self.0[start..start + length])
    }
}
