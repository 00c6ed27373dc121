//! The live terminal UI, in the Elm style: [`App`] state, [`Action`] messages, [`App::update`],
//! and views that draw a [`Snapshot`] (the same snapshot every other renderer reads). The run
//! loop owns the source and the engine; the UI never reaches back into them.

pub mod app;
pub mod columns;
pub mod history;
pub mod view;
pub mod views;

#[cfg(test)]
mod tests;

pub use app::{Action, App, Tab};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

/// Restores the terminal however the UI ends (return, error, or panic: `ratatui::init`
/// installs a panic hook that restores it too).
pub struct TerminalGuard;

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Map a key press to an action (outside filter typing, which [`App`] handles itself).
/// Esc closes what is open (help, detail, filter), as in htop and k9s; only `q` and Ctrl-C quit.
pub fn action_for_key(code: KeyCode, modifiers: KeyModifiers) -> Option<Action> {
    Some(match code {
        KeyCode::Char('q') => Action::Quit,
        KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => Action::Quit,
        KeyCode::Esc => Action::Back,
        KeyCode::Tab | KeyCode::Right | KeyCode::Char('l') => Action::NextTab,
        KeyCode::BackTab | KeyCode::Left | KeyCode::Char('h') => Action::PrevTab,
        KeyCode::Down | KeyCode::Char('j') => Action::Down,
        KeyCode::Up | KeyCode::Char('k') => Action::Up,
        KeyCode::PageDown => Action::PageDown,
        KeyCode::PageUp => Action::PageUp,
        KeyCode::Char('f') if modifiers.contains(KeyModifiers::CONTROL) => Action::PageDown,
        KeyCode::Char('b') if modifiers.contains(KeyModifiers::CONTROL) => Action::PageUp,
        KeyCode::Home | KeyCode::Char('g') => Action::Top,
        KeyCode::End | KeyCode::Char('G') => Action::Bottom,
        KeyCode::Char('s') => Action::CycleSort,
        KeyCode::Char('S') => Action::ReverseSort,
        KeyCode::Char('w') => Action::WriteReport,
        KeyCode::Enter | KeyCode::Char('d') => Action::ToggleDetail,
        KeyCode::Char('p') | KeyCode::Char(' ') => Action::TogglePause,
        KeyCode::Char('?') => Action::ToggleHelp,
        KeyCode::Char('/') => Action::StartFilter,
        KeyCode::Char('m') => Action::ToggleMerge,
        KeyCode::Char(c) => Action::SelectTab(Tab::at(view_for_digit(c)?)?),
        _ => return None,
    })
}

/// The view a digit key selects: `1`..`9` the first nine, `0` the tenth (Tab reaches all).
pub fn view_for_digit(c: char) -> Option<usize> {
    match c.to_digit(10)? {
        0 => Some(9),
        d => Some(d as usize - 1),
    }
}

/// The digit key of the view at `index`, if it has one.
pub fn digit_for_view(index: usize) -> Option<char> {
    match index {
        0..=8 => char::from_digit(index as u32 + 1, 10),
        9 => Some('0'),
        _ => None,
    }
}

/// Write `snap` as the JSON document to a new file in `dir`, named after the report's time;
/// returns its path (for the status line).
pub fn write_report(
    snap: &crate::report::Snapshot,
    dir: &std::path::Path,
) -> std::io::Result<std::path::PathBuf> {
    let stamp = snap.summary.interval_end_ts / 1_000_000;
    let mut n = 0;
    loop {
        let name = if n == 0 {
            format!("roce-observer-report-{stamp}.json")
        } else {
            format!("roce-observer-report-{stamp}-{n}.json")
        };
        let path = dir.join(name);
        // create_new: never overwrite a file, never follow a planted symlink.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => {
                let mut w = std::io::BufWriter::new(file);
                crate::report::write_document(&mut w, snap)?;
                std::io::Write::flush(&mut w)?;
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Read keys on a thread of its own (crossterm's read blocks) and send actions to the run loop.
pub fn spawn_key_reader(tx: tokio::sync::mpsc::UnboundedSender<Action>) {
    std::thread::spawn(move || {
        loop {
            match event::read() {
                Ok(Event::Key(key)) if key.kind == KeyEventKind::Press => {
                    if tx.send(Action::Key(key.code, key.modifiers)).is_err() {
                        return;
                    }
                }
                Ok(Event::Resize(..)) => {
                    if tx.send(Action::Redraw).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
}
