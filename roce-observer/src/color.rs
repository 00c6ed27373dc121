//! Whether output may carry colour: `--color auto|always|never` and the `NO_COLOR` convention
//! (no-color.org: any non-empty value turns colour off). Decided once, in `main`, and read by
//! the renderers that colour anything (the terminal UI). Colour is never the only signal: the
//! views mark problems with a symbol too, so monochrome output loses nothing.

use std::sync::OnceLock;

use clap::ValueEnum;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// Colour when stdout is a terminal and NO_COLOR is unset or empty.
    #[default]
    Auto,
    /// Always colour (even with NO_COLOR set or without a terminal).
    Always,
    /// Never colour.
    Never,
}

impl ColorChoice {
    /// Resolve the choice: `no_color` is the value of NO_COLOR, `terminal` whether stdout is
    /// a terminal.
    pub fn enabled(self, no_color: Option<&std::ffi::OsStr>, terminal: bool) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => no_color.is_none_or(|v| v.is_empty()) && terminal,
        }
    }
}

static ENABLED: OnceLock<bool> = OnceLock::new();

/// Fix the process-wide decision (the first call wins).
pub fn init(choice: ColorChoice) {
    use std::io::IsTerminal as _;
    let no_color = std::env::var_os("NO_COLOR");
    let _ = ENABLED.set(choice.enabled(no_color.as_deref(), std::io::stdout().is_terminal()));
}

/// Whether renderers may colour. Before [`init`] (library use, tests): colour on, which only
/// matters to callers that draw to a real terminal.
pub fn enabled() -> bool {
    ENABLED.get().copied().unwrap_or(true)
}

/// Drop every colour from a drawn frame, keeping the text and its modifiers (bold, reverse):
/// the UI's selection stays visible in reverse video.
pub fn strip(buffer: &mut ratatui::buffer::Buffer) {
    for cell in buffer.content.iter_mut() {
        cell.set_fg(ratatui::style::Color::Reset);
        cell.set_bg(ratatui::style::Color::Reset);
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use ratatui::{
        buffer::Buffer,
        layout::Rect,
        style::{Color, Modifier, Style},
    };

    use super::*;

    #[test]
    fn no_color_rules() {
        let set = Some(OsStr::new("1"));
        let empty = Some(OsStr::new(""));
        // Auto: a terminal and no (or an empty) NO_COLOR.
        assert!(ColorChoice::Auto.enabled(None, true));
        assert!(ColorChoice::Auto.enabled(empty, true));
        assert!(!ColorChoice::Auto.enabled(set, true));
        assert!(!ColorChoice::Auto.enabled(None, false));
        // The flag overrides the environment, as no-color.org asks of explicit options.
        assert!(ColorChoice::Always.enabled(set, false));
        assert!(!ColorChoice::Never.enabled(None, true));
    }

    #[test]
    fn strip_keeps_text_and_modifiers() {
        let mut buf = Buffer::empty(Rect::new(0, 0, 4, 1));
        buf.set_string(
            0,
            0,
            "!3",
            Style::new()
                .fg(Color::Red)
                .bg(Color::Blue)
                .add_modifier(Modifier::BOLD),
        );
        strip(&mut buf);
        let cell = &buf.content[0];
        assert_eq!(cell.symbol(), "!");
        assert_eq!(cell.fg, Color::Reset);
        assert_eq!(cell.bg, Color::Reset);
        assert!(cell.modifier.contains(Modifier::BOLD));
    }
}
