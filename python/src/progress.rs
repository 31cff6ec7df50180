//! Progress bars drawn on Python's `sys.stderr` (a notebook shows it there).

use pyo3::prelude::*;
use std::sync::Mutex;

/// A progress bar's terminal that is Python's `sys.stderr` (a notebook shows it there): each
/// redraw is a carriage return and the bar's line, as tqdm draws, written when indicatif
/// flushes (it moves no cursor: a bar is one line).
#[derive(Debug, Default)]
pub(crate) struct PyStderr {
    line: Mutex<String>,
}

impl PyStderr {
    fn put(&self, s: &str) -> std::io::Result<()> {
        let mut line = self.line.lock().unwrap_or_else(|e| e.into_inner());
        line.push_str(s.trim_end_matches('\n'));
        Ok(())
    }
}

impl indicatif::TermLike for PyStderr {
    fn width(&self) -> u16 {
        100
    }
    fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        self.put(s)
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        self.put(s)
    }
    fn clear_line(&self) -> std::io::Result<()> {
        self.line.lock().unwrap_or_else(|e| e.into_inner()).clear();
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        let line = std::mem::take(&mut *self.line.lock().unwrap_or_else(|e| e.into_inner()));
        let text = format!("\r{line:<100}");
        // A bar that cannot be drawn is not worth failing the work for.
        Python::attach(|py| {
            if let Ok(err) = py.import("sys").and_then(|sys| sys.getattr("stderr")) {
                let _ = err.call_method1("write", (text,));
                let _ = err.call_method0("flush");
            }
        });
        Ok(())
    }
}
