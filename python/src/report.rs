//! Reports and audits as Python objects: what `hefprobe run` / `compare` / `explain` / `audit`
//! print, as values.

use crate::{to_py, DeviceError};
use hefprobe::report::audit::Audited;
use hefprobe::report::{Format, ReportTarget};
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::path::PathBuf;
use std::sync::Mutex;

/// A report: what `hefprobe run` / `compare` / `explain` print, as a value.
#[pyclass(frozen, module = "hefprobe", name = "Report")]
pub(crate) struct PyReport {
    inner: Mutex<hefprobe::report::Report>,
}

impl PyReport {
    pub(crate) fn new(r: hefprobe::report::Report) -> Self {
        PyReport { inner: Mutex::new(r) }
    }

    fn render(&self, format: Format, path: Option<PathBuf>) -> PyResult<String> {
        let mut r = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        hefprobe::report::write(&mut *r, &[ReportTarget { format, path }], false).map_err(to_py)
    }
}

pub(crate) fn json_value<'py>(py: Python<'py>, v: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    let text = serde_json::to_string(v).map_err(|e| DeviceError::new_err(e.to_string()))?;
    py.import("json")?.call_method1("loads", (text,))
}

#[pymethods]
impl PyReport {
    /// True when every comparison is within its thresholds and explain, where it ran, names no
    /// fault (`hefprobe` exit code 0).
    #[getter]
    fn passed(&self) -> bool {
        !self.inner.lock().unwrap_or_else(|e| e.into_inner()).failed()
    }

    /// The first failing tap of the first drifting comparison's first phase, as a dict (phase,
    /// tap, cosine, failures, worst_heads, sentence, ...), or None.
    #[getter]
    fn first_drift<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let r = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let first = r.located.iter().flatten().next();
        first.map(|l| json_value(py, l)).transpose()
    }

    /// The fault explain ranked first, when it explains the drift (else None).
    #[getter]
    fn best_explanation(&self) -> Option<String> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).explain.as_ref().and_then(|e| e.best.clone())
    }

    /// Every compared tap, one dict each (the JSON report's rows), with the pair it belongs to.
    #[getter]
    fn rows<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let r = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let out = PyList::empty(py);
        for pair in &r.comparisons {
            for row in &pair.rows {
                let d = json_value(py, row)?;
                d.set_item("reference", &pair.reference)?;
                d.set_item("candidate", &pair.candidate)?;
                out.append(d)?;
            }
        }
        Ok(out)
    }

    /// The whole report as a dict (schema hefprobe.report/1, the JSON report).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json_value(py, &*self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn to_json(&self) -> PyResult<String> {
        self.render(Format::Json, None)
    }

    fn to_markdown(&self) -> PyResult<String> {
        self.render(Format::Markdown, None)
    }

    fn to_terminal(&self) -> PyResult<String> {
        self.render(Format::Terminal, None)
    }

    /// Write the report's SVG figures as PREFIX-*.svg; returns their paths.
    fn to_svg(&self, prefix: PathBuf) -> PyResult<Vec<String>> {
        self.render(Format::Svg, Some(prefix))?;
        Ok(self.inner.lock().unwrap_or_else(|e| e.into_inner()).svg.clone())
    }

    fn __repr__(&self) -> PyResult<String> {
        self.to_terminal()
    }
}

/// A HEF audit (`hefprobe audit`), or a diff against a reference HEF.
#[pyclass(frozen, module = "hefprobe", name = "Audit")]
pub(crate) struct PyAudit(pub(crate) Audited);

#[pymethods]
impl PyAudit {
    /// True when no error-severity finding (or difference) was found.
    #[getter]
    fn passed(&self) -> bool {
        !self.0.failed
    }

    /// The findings (or differences), as the JSON report's dicts.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py.import("json")?.call_method1("loads", (self.0.json.as_str(),))
    }

    fn to_json(&self) -> String {
        self.0.json.clone()
    }

    fn to_markdown(&self) -> String {
        self.0.doc.markdown()
    }

    fn __repr__(&self) -> String {
        self.0.doc.terminal(false)
    }
}
