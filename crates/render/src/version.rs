//! MatrixOne and operator versions, read as the Go operator reads them
//! (blang/semver `ParseTolerant`, reference §1).

use cnpool_api::cnset::CNSetTemplate;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
    /// Pre-release and build text after the numbers, with its `-`/`+`.
    pub suffix: String,
}

impl Version {
    /// Tolerant: a `v` prefix is fine and missing minor/patch are 0.
    pub fn parse_tolerant(text: &str) -> Option<Self> {
        let text = text.trim();
        let text = text.strip_prefix('v').unwrap_or(text);
        let numbers_end = text.find(['-', '+']).unwrap_or(text.len());
        let (numbers, suffix) = text.split_at(numbers_end);
        let parts: Vec<&str> = numbers.split('.').collect();
        if parts.is_empty() || parts.len() > 3 {
            return None;
        }
        let mut values = [0_u64; 3];
        for (slot, part) in values.iter_mut().zip(&parts) {
            // semver refuses leading zeros and empty parts.
            if part.is_empty() || (part.len() > 1 && part.starts_with('0')) || !part.bytes().all(|b| b.is_ascii_digit())
            {
                return None;
            }
            *slot = part.parse().ok()?;
        }
        if suffix == "-" || suffix == "+" {
            return None;
        }
        Some(Version { major: values[0], minor: values[1], patch: values[2], suffix: suffix.to_owned() })
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}{}", self.major, self.minor, self.patch, self.suffix)
    }
}

/// The MatrixOne version: `semanticVersion`, else the image tag (the text
/// after the last `:`). `None` when neither parses (the webhook refuses that).
pub fn mo_version(template: &CNSetTemplate) -> Option<Version> {
    if let Some(version) = template.semantic_version.as_deref().and_then(Version::parse_tolerant) {
        return Some(version);
    }
    let (_, tag) = template.image.rsplit_once(':')?;
    Version::parse_tolerant(tag)
}

/// Gates InplaceConfigmapUpdate and InplacePoolRollingUpdate: on iff the
/// operator version has major 1 and minor ≥ 3 (a missing or unreadable
/// version is 1.2.0; "2.0.0" turns them off, Go's same-major rule).
pub fn inplace_gates(template: &CNSetTemplate) -> bool {
    let version = template.operator_version.as_deref().and_then(Version::parse_tolerant);
    version.is_some_and(|version| version.major == 1 && version.minor >= 3)
}

/// Whether the operator version goes on the pod as an annotation (> 1.2.0).
pub fn operator_version_annotation(template: &CNSetTemplate) -> Option<String> {
    let version = template.operator_version.as_deref().and_then(Version::parse_tolerant)?;
    let newer = (version.major, version.minor, version.patch) > (1, 2, 0)
        || ((version.major, version.minor, version.patch) == (1, 2, 0) && version.suffix.starts_with('+'));
    newer.then(|| version.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_tolerantly() {
        assert_eq!(Version::parse_tolerant("v1.2.3").map(|v| v.to_string()), Some("1.2.3".into()));
        assert_eq!(Version::parse_tolerant("1.2").map(|v| v.to_string()), Some("1.2.0".into()));
        assert_eq!(Version::parse_tolerant("2.0.0-rc1").map(|v| v.major), Some(2));
        assert_eq!(Version::parse_tolerant("latest"), None);
    }

    #[test]
    fn gates_follow_the_same_major_rule() {
        let with = |version: &str| CNSetTemplate { operator_version: Some(version.into()), ..CNSetTemplate::default() };
        assert!(inplace_gates(&with("1.3.0")));
        assert!(inplace_gates(&with("1.4.2")));
        assert!(!inplace_gates(&with("1.2.9")));
        assert!(!inplace_gates(&with("2.0.0")));
        assert!(!inplace_gates(&CNSetTemplate::default()));
    }

    #[test]
    fn the_image_tag_is_the_version_unless_semantic_version_is_set() {
        let template = CNSetTemplate { image: "reg:5000/matrixone:v1.2.3".into(), ..CNSetTemplate::default() };
        assert_eq!(mo_version(&template).map(|v| v.to_string()), Some("1.2.3".into()));
        let pinned = CNSetTemplate { semantic_version: Some("2.1".into()), ..template };
        assert_eq!(mo_version(&pinned).map(|v| v.to_string()), Some("2.1.0".into()));
    }
}
