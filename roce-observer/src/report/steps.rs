//! How the steps section is described in words, shared by the table and the terminal UI.

use super::StepsSnapshot;

/// Where the steps were found: the whole data kept, or only its latest part (the step time
/// changed: the earlier steps had another period, or none).
pub fn steps_window(st: &StepsSnapshot) -> String {
    if st.retained_s > st.window_s * 1.01 {
        format!(
            "the last {:.1} s of {:.1} s (no single period before)",
            st.window_s, st.retained_s
        )
    } else {
        format!("{:.1} s", st.window_s)
    }
}
