//! The live terminal UI, in the Elm style: [`App`] state, [`Action`] messages, [`App::update`],
//! and views that draw a [`Snapshot`] (the same snapshot every other renderer reads). The run
//! loop owns the source and the engine; the UI never reaches back into them.

pub mod app;
pub mod columns;
pub mod diagnosis;
pub mod history;
pub mod view;

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
pub fn action_for_key(code: KeyCode, modifiers: KeyModifiers) -> Option<Action> {
    Some(match code {
        KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
        KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => Action::Quit,
        KeyCode::Tab | KeyCode::Right | KeyCode::Char('l') => Action::NextTab,
        KeyCode::BackTab | KeyCode::Left | KeyCode::Char('h') => Action::PrevTab,
        KeyCode::Down | KeyCode::Char('j') => Action::Down,
        KeyCode::Up | KeyCode::Char('k') => Action::Up,
        KeyCode::Home | KeyCode::Char('g') => Action::Top,
        KeyCode::End | KeyCode::Char('G') => Action::Bottom,
        KeyCode::Char('s') => Action::CycleSort,
        KeyCode::Enter | KeyCode::Char('d') => Action::ToggleDetail,
        KeyCode::Char('p') | KeyCode::Char(' ') => Action::TogglePause,
        KeyCode::Char('?') => Action::ToggleHelp,
        KeyCode::Char('/') => Action::StartFilter,
        KeyCode::Char('m') => Action::ToggleMerge,
        KeyCode::Char('1') => Action::SelectTab(Tab::Flows),
        KeyCode::Char('2') => Action::SelectTab(Tab::Pfc),
        KeyCode::Char('3') => Action::SelectTab(Tab::Ecmp),
        KeyCode::Char('4') => Action::SelectTab(Tab::Alerts),
        KeyCode::Char('5') => Action::SelectTab(Tab::Nic),
        KeyCode::Char('6') => Action::SelectTab(Tab::Mirror),
        KeyCode::Char('7') => Action::SelectTab(Tab::Steps),
        KeyCode::Char('8') => Action::SelectTab(Tab::Paths),
        KeyCode::Char('9') => Action::SelectTab(Tab::Storm),
        _ => return None,
    })
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
