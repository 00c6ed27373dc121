//! One named check of a scenario (expected against actual) and the list a scenario's checks
//! are gathered in: every part of the harness records into it.

#[derive(Debug, Clone)]
pub(super) struct Check {
    pub(super) name: String,
    pub(super) expected: String,
    pub(super) actual: String,
    pub(super) ok: bool,
}

impl Check {
    pub(super) fn describe(&self) -> String {
        format!(
            "{}: expected {}, got {}",
            self.name, self.expected, self.actual
        )
    }
}

pub(super) struct Checks(pub(super) Vec<Check>);
impl Checks {
    pub(super) fn eq<T: PartialEq + std::fmt::Display>(
        &mut self,
        name: &str,
        expected: T,
        actual: T,
    ) {
        self.0.push(Check {
            name: name.into(),
            expected: expected.to_string(),
            actual: actual.to_string(),
            ok: expected == actual,
        });
    }
    pub(super) fn range(&mut self, name: &str, lo: i64, hi: i64, actual: i64) {
        self.0.push(Check {
            name: name.into(),
            expected: format!("{lo}..={hi}"),
            actual: actual.to_string(),
            ok: lo <= actual && actual <= hi,
        });
    }
    pub(super) fn truth(&mut self, name: &str, expected: &str, actual: String, ok: bool) {
        self.0.push(Check {
            name: name.into(),
            expected: expected.into(),
            actual,
            ok,
        });
    }
}
