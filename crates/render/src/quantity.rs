//! Kubernetes quantities as Go's `resource.Quantity` reads and prints them.
//!
//! Go prints a quantity in canonical form (`1000` → `1k`, `1536Mi` stays,
//! `1024Mi` → `1Gi`), and that form enters the CNSet hash, the S3 cache
//! sizes of the CN config and the webhook's defaults, so it is reproduced
//! here: a quantity is kept as an exact decimal `mantissa × 10^exponent`
//! plus the format its suffix chose.

use std::fmt;

/// The notation a quantity was written in; Go prints it back in the same one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `Ki`, `Mi`, … (powers of 1024).
    BinarySI,
    /// `m`, `k`, `M`, … or no suffix (powers of 1000).
    DecimalSI,
    /// `1e3`, `5E-3`.
    DecimalExponent,
}

/// An exact quantity: `mantissa × 10^exponent`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quantity {
    mantissa: i128,
    exponent: i32,
    pub format: Format,
}

/// A quantity text Go's `resource.ParseQuantity` would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{text}` is not a Kubernetes quantity: write a number with an optional suffix, e.g. `500m`, `2`, `8Gi` or `1e3`"
)]
pub struct QuantityError {
    pub text: String,
}

const BINARY: [(&str, u32); 6] = [("Ki", 1), ("Mi", 2), ("Gi", 3), ("Ti", 4), ("Pi", 5), ("Ei", 6)];
const DECIMAL: [(&str, i32); 10] =
    [("n", -9), ("u", -6), ("m", -3), ("", 0), ("k", 3), ("M", 6), ("G", 9), ("T", 12), ("P", 15), ("E", 18)];

impl Quantity {
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let error = || QuantityError { text: text.to_owned() };
        let trimmed = text.trim();
        let (negative, unsigned) = match trimmed.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, trimmed.strip_prefix('+').unwrap_or(trimmed)),
        };
        let number_len = unsigned.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(unsigned.len());
        let (number, suffix) = unsigned.split_at(number_len);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err(error());
        }
        let digits = format!("{whole}{fraction}");
        let mut mantissa: i128 = digits.parse().map_err(|_| error())?;
        let mut exponent = -i32::try_from(fraction.len()).map_err(|_| error())?;
        let format = if let Some((_, power)) = BINARY.iter().find(|(name, _)| *name == suffix) {
            mantissa = mantissa.checked_mul(1024_i128.pow(*power)).ok_or_else(error)?;
            Format::BinarySI
        } else if let Some((_, power)) = DECIMAL.iter().find(|(name, _)| *name == suffix) {
            exponent += power;
            Format::DecimalSI
        } else if let Some(power) = suffix.strip_prefix(['e', 'E']) {
            exponent += power.parse::<i32>().map_err(|_| error())?;
            Format::DecimalExponent
        } else {
            return Err(error());
        };
        if negative {
            mantissa = -mantissa;
        }
        let mut quantity = Quantity { mantissa, exponent, format };
        quantity.normalise();
        // Go keeps nothing finer than nano units and rounds up (away from zero) to them.
        if quantity.exponent < -9 {
            let shift = u32::try_from(-9 - quantity.exponent).map_err(|_| error())?;
            let divisor = 10_i128.checked_pow(shift).ok_or_else(error)?;
            let rounded =
                quantity.mantissa / divisor + quantity.mantissa.signum() * i128::from(quantity.mantissa % divisor != 0);
            quantity = Quantity { mantissa: rounded, exponent: -9, format };
            quantity.normalise();
        }
        Ok(quantity)
    }

    /// An integer number of units (bytes, cores × 1), in `format`.
    pub fn from_units(units: i64, format: Format) -> Self {
        let mut quantity = Quantity { mantissa: i128::from(units), exponent: 0, format };
        quantity.normalise();
        quantity
    }

    /// The value rounded up to a whole unit, as Go's `Quantity.Value()`.
    pub fn value(&self) -> i128 {
        if self.exponent >= 0 {
            self.mantissa.saturating_mul(10_i128.saturating_pow(self.exponent.unsigned_abs()))
        } else {
            let divisor = 10_i128.saturating_pow(self.exponent.unsigned_abs());
            let whole = self.mantissa / divisor;
            if self.mantissa % divisor > 0 { whole + 1 } else { whole }
        }
    }

    fn normalise(&mut self) {
        if self.mantissa == 0 {
            self.exponent = 0;
            return;
        }
        while self.mantissa % 10 == 0 {
            self.mantissa /= 10;
            self.exponent += 1;
        }
    }

    fn is_integer(&self) -> bool {
        self.exponent >= 0
    }
}

/// Go's canonical text (`Quantity.String()`).
impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let binary = self.format == Format::BinarySI && self.is_integer() && self.value().abs() >= 1024;
        if binary {
            let mut amount = self.value();
            let mut power = 0;
            while amount != 0 && amount % 1024 == 0 && power < BINARY.len() {
                amount /= 1024;
                power += 1;
            }
            let suffix = if power == 0 { "" } else { BINARY[power - 1].0 };
            return write!(f, "{amount}{suffix}");
        }
        // Decimal: the exponent becomes a multiple of 3 by growing the mantissa.
        let mut mantissa = self.mantissa;
        let mut exponent = self.exponent;
        while exponent.rem_euclid(3) != 0 {
            mantissa *= 10;
            exponent -= 1;
        }
        let format = if self.format == Format::DecimalExponent { Format::DecimalExponent } else { Format::DecimalSI };
        match DECIMAL.iter().find(|(_, power)| *power == exponent) {
            Some((suffix, _)) if format == Format::DecimalSI => write!(f, "{mantissa}{suffix}"),
            _ if exponent == 0 => write!(f, "{mantissa}"),
            _ => write!(f, "{mantissa}e{exponent}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> String {
        Quantity::parse(text).map(|q| q.to_string()).unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn quantities_print_in_kubernetes_canonical_form() {
        // Known Kubernetes canonicalisations (kubectl shows these).
        let cases = [
            ("8Gi", "8Gi"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("1000", "1k"),
            ("1024", "1024"),
            ("0.5", "500m"),
            ("1000m", "1"),
            ("100m", "100m"),
            ("1.5Gi", "1536Mi"),
            ("1.5Ki", "1536"),
            ("512", "512"),
            ("0", "0"),
            ("1e3", "1e3"),
            ("1500e-3", "1500e-3"),
            ("10G", "10G"),
            ("2", "2"),
        ];
        for (text, expected) in cases {
            assert_eq!(canonical(text), expected, "{text}");
        }
    }

    #[test]
    fn malformed_quantities_are_refused_with_an_example() {
        for text in ["", "Gi", "1.2.3", "1X", "abc"] {
            let err = Quantity::parse(text).unwrap_err();
            assert!(err.to_string().contains("e.g. `500m`"), "{text}: {err}");
        }
    }

    #[test]
    fn halving_a_memory_request_keeps_its_notation() {
        // The webhook's memory cache default (reference §1: 8Gi → 4Gi, 3Gi → 1536Mi).
        for (request, half) in [("8Gi", "4Gi"), ("3Gi", "1536Mi"), ("8G", "4G")] {
            let quantity = Quantity::parse(request).unwrap();
            let halved = Quantity::from_units(i64::try_from(quantity.value() / 2).unwrap(), quantity.format);
            assert_eq!(halved.to_string(), half);
        }
    }
}
