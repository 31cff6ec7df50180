//! Captures shared with numpy without a copy, and the sides of a comparison as Python gives them
//! (a Capture, a dict of arrays, an `.npz` path).

use crate::{work, InputError};
use hefprobe::capture::{self, CaptureFile, Store};
use hefprobe::tap::Key;
use numpy::{PyArray, PyArrayDyn, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyIterator, PyList};
use std::borrow::Cow;
use std::path::{Path, PathBuf};

/// A capture: `"PHASE/TAP"` → float32 array, held by Rust and shown to numpy without a copy
/// (read-only views that keep the capture alive).
#[pyclass(frozen, module = "hefprobe", name = "Capture")]
pub(crate) struct PyCapture {
    pub(crate) inner: capture::Capture,
    pub(crate) notes: Vec<String>,
}

#[pymethods]
impl PyCapture {
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __contains__(&self, key: &str) -> bool {
        self.inner.get(&Key::parse(key)).is_some()
    }

    fn __getitem__<'py>(slf: &Bound<'py, Self>, key: &str) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        let Some(a) = slf.get().inner.get(&Key::parse(key)) else {
            return Err(PyKeyError::new_err(key.to_string()));
        };
        // SAFETY: the array lives in a frozen object that is never changed, and the view keeps
        // that object alive (its base).
        let view = unsafe { PyArray::borrow_from_array(a, slf.clone().into_any()) };
        view.getattr("flags")?.setattr("writeable", false)?;
        Ok(view)
    }

    /// The keys, in execution order (phase, then layer and tap).
    fn keys(&self) -> Vec<String> {
        self.inner.keys().map(ToString::to_string).collect()
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyIterator>> {
        PyList::new(py, self.keys())?.into_any().try_iter()
    }

    /// What the reader must know (config.json keys hefprobe does not know, defaults applied).
    #[getter]
    fn notes(&self) -> Vec<String> {
        self.notes.clone()
    }

    /// Write the capture as `.npz` (the command line's format: `hefprobe compare` reads it).
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        work(py, || capture::save(&self.inner, &path, true))
    }

    /// Read an `.npz` capture (`hefprobe reference -o`, `capture`, `run --save-captures`).
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<PyCapture> {
        let inner = work(py, || {
            let file = CaptureFile::open(&path)?;
            let mut c = capture::Capture::default();
            for key in file.keys() {
                if let Some(a) = file.get(&key)? {
                    c.insert(key, a.into_owned());
                }
            }
            Ok(c)
        })?;
        Ok(PyCapture { inner, notes: Vec::new() })
    }

    fn __repr__(&self) -> String {
        let phases: Vec<String> = capture::phases(&self.inner).iter().map(ToString::to_string).collect();
        format!("<hefprobe.Capture: {} taps, phases {}>", self.inner.len(), phases.join(", "))
    }
}

/// A `dict[str, ndarray]` read in place: each array's data (C-contiguous float32, made so by
/// the Python layer) is copied out one tap at a time when the comparison asks for it, as a
/// capture file's is read.
pub(crate) struct Arrays {
    entries: Vec<(Key, usize, Vec<usize>)>,
    _owners: Vec<Py<PyAny>>,
}

impl Arrays {
    fn from_dict(d: &Bound<'_, PyDict>, what: &str) -> PyResult<Arrays> {
        let (mut entries, mut owners) = (Vec::new(), Vec::new());
        for (k, v) in d.iter() {
            let name: String =
                k.extract().map_err(|_| InputError::new_err(format!("{what}: a key is not a str")))?;
            let a: PyReadonlyArrayDyn<'_, f32> = v
                .extract()
                .map_err(|_| InputError::new_err(format!("{what}[{name:?}]: not a float32 numpy array")))?;
            let data = a.as_slice().map_err(|_| {
                InputError::new_err(format!(
                    "{what}[{name:?}]: not C-contiguous (np.ascontiguousarray makes it so)"
                ))
            })?;
            entries.push((Key::parse(&name), data.as_ptr() as usize, a.shape().to_vec()));
            owners.push(v.unbind());
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Arrays { entries, _owners: owners })
    }
}

impl Store for Arrays {
    fn keys(&self) -> Vec<Key> {
        self.entries.iter().map(|e| e.0.clone()).collect()
    }

    fn contains(&self, key: &Key) -> bool {
        self.entries.binary_search_by(|e| e.0.cmp(key)).is_ok()
    }

    fn get(&self, key: &Key) -> hefprobe::Result<Option<Cow<'_, ndarray::ArrayD<f32>>>> {
        let Ok(i) = self.entries.binary_search_by(|e| e.0.cmp(key)) else { return Ok(None) };
        let (_, ptr, shape) = &self.entries[i];
        // SAFETY: the pointer is a C-contiguous float32 buffer of `shape`, kept alive by
        // `_owners` (as numpy's own functions, the data may be changed by another Python thread
        // while the GIL is released; the comparison then reads what is there).
        let view = unsafe { ndarray::ArrayViewD::from_shape_ptr(ndarray::IxDyn(shape), *ptr as *const f32) };
        Ok(Some(Cow::Owned(view.to_owned())))
    }
}

/// One side of a comparison, as Python gave it.
pub(crate) enum Side {
    Held(Py<PyCapture>),
    File(PathBuf),
    Arrays(Arrays),
}

/// A side from a Capture, a `dict` or a path (str or os.PathLike) to an `.npz`.
pub(crate) fn side(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Side> {
    if let Ok(c) = obj.cast::<PyCapture>() {
        Ok(Side::Held(c.clone().unbind()))
    } else if let Ok(d) = obj.cast::<PyDict>() {
        Ok(Side::Arrays(Arrays::from_dict(d, what)?))
    } else if let Ok(p) = obj.extract::<PathBuf>() {
        Ok(Side::File(p))
    } else {
        Err(InputError::new_err(format!(
            "{what}: a hefprobe.Capture, a dict of numpy arrays or an .npz path, not {}",
            obj.get_type().name()?
        )))
    }
}

/// The side as a capture to read; through the name map `map` when given (a held side is
/// written to `scratch` first: a map reads an `.npz`).
pub(crate) fn open<'a>(side: &'a Side, map: Option<&Path>, scratch: &Path) -> hefprobe::Result<Opened<'a>> {
    let held: &dyn Store = match side {
        Side::File(p) => match map {
            None => return Ok(Opened::Owned(Box::new(CaptureFile::open(p)?))),
            Some(m) => return hefprobe::backend::dump::mapped(p, m, scratch).map(Opened::Owned),
        },
        Side::Held(c) => &c.get().inner,
        Side::Arrays(a) => a,
    };
    let Some(m) = map else { return Ok(Opened::Borrowed(held)) };
    let file = scratch.join("candidate.npz");
    capture::save(held, &file, false)?;
    hefprobe::backend::dump::mapped(&file, m, scratch).map(Opened::Owned)
}

pub(crate) enum Opened<'a> {
    Borrowed(&'a dyn Store),
    Owned(Box<dyn Store>),
}

impl Opened<'_> {
    pub(crate) fn store(&self) -> &dyn Store {
        match self {
            Opened::Borrowed(s) => *s,
            Opened::Owned(b) => b.as_ref(),
        }
    }
}
