use super::*;
use std::io::Write;

/// A one-member .npz whose member is `member` verbatim (stored, not compressed).
fn npz_with(name: &str, member: &[u8]) -> Vec<u8> {
    let mut buf = std::io::Cursor::new(Vec::new());
    {
        let mut z = zip::ZipWriter::new(&mut buf);
        let opts =
            zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        z.start_file(name, opts).unwrap();
        z.write_all(member).unwrap();
        z.finish().unwrap();
    }
    buf.into_inner()
}

/// An npy v1.0 member with header dict `dict` and `data` after it.
fn npy(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut h = dict.to_string();
    while !(10 + h.len() + 1).is_multiple_of(64) {
        h.push(' ');
    }
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(h.len() as u16).to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out
}

fn err(bytes: &[u8]) -> String {
    read_all_from_bytes(bytes).unwrap_err().to_string()
}

#[test]
fn reads_what_ndarray_npy_writes_in_order_and_converts_types() {
    let mut buf = std::io::Cursor::new(Vec::new());
    {
        let mut w = ndarray_npy::NpzWriter::new(&mut buf);
        w.add_array("b/x", &ndarray::arr2(&[[1f32, 2., 3.], [4., 5., 6.]])).unwrap();
        w.add_array("a", &ndarray::arr1(&[7i64, -8])).unwrap();
        w.add_array("c", &ndarray::arr1(&[0.5f64])).unwrap();
        w.finish().unwrap();
    }
    let all = read_all_from_bytes(buf.get_ref()).unwrap();
    let keys: Vec<&str> = all.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["b/x", "a", "c"]);
    assert_eq!(all[0].1.shape(), &[2, 3]);
    assert_eq!(all[0].1.iter().copied().collect::<Vec<_>>(), [1., 2., 3., 4., 5., 6.]);
    assert_eq!(all[1].1.iter().copied().collect::<Vec<_>>(), [7., -8.]);
    assert_eq!(all[2].1.iter().copied().collect::<Vec<_>>(), [0.5]);
}

#[test]
fn fortran_order_and_big_endian_are_honoured() {
    let data: Vec<u8> = [1f32, 4., 2., 5., 3., 6.].iter().flat_map(|v| v.to_be_bytes()).collect();
    let bytes = npz_with("x.npy", &npy("{'descr': '>f4', 'fortran_order': True, 'shape': (2, 3), }", &data));
    let (_, a) = read_all_from_bytes(&bytes).unwrap().remove(0);
    assert_eq!(a.iter().copied().collect::<Vec<_>>(), [1., 2., 3., 4., 5., 6.]);
}

#[test]
fn a_header_claiming_a_huge_shape_is_an_error_before_any_allocation() {
    let bytes = npz_with(
        "x.npy",
        &npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }", &[0; 8]),
    );
    let e = err(&bytes);
    assert!(e.contains("<bytes>") && e.contains("`x`") && e.contains("truncated or damaged"), "{e}");
    assert!(e.contains("[1000000000000]") && e.contains("8 bytes of data"), "{e}");
    // Overflowing the product is the same error, not a wrap-around.
    let bytes = npz_with(
        "x.npy",
        &npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }", &[0; 8]),
    );
    assert!(err(&bytes).contains("more bytes than this machine can address"), "{}", err(&bytes));
}

#[test]
fn each_kind_of_damage_has_its_own_message() {
    // Truncated data.
    let good = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", &[0; 16]);
    let e = err(&npz_with("t.npy", &good[..good.len() - 3]));
    assert!(e.contains("truncated") && e.contains("13 bytes of data"), "{e}");
    // A member that is not an npy array.
    let e = err(&npz_with("n.npy", b"hello, world"));
    assert!(e.contains("is not an npy array"), "{e}");
    // Bad header.
    let e = err(&npz_with("h.npy", &npy("{'descr': '<f4', 'shape': (4,), }", &[0; 16])));
    assert!(e.contains("bad npy header") && e.contains("fortran_order"), "{e}");
    let e =
        err(&npz_with("h.npy", &npy("{'descr': '<f4', 'fortran_order': False, 'shape': (x,), }", &[0; 16])));
    assert!(e.contains("bad npy header") && e.contains("`x` is not a size"), "{e}");
    // Unsupported dtype, named.
    let e =
        err(&npz_with("d.npy", &npy("{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", &[0; 8])));
    assert!(e.contains("unsupported dtype float16") && e.contains("float32"), "{e}");
    let e =
        err(&npz_with("d.npy", &npy("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", &[0; 8])));
    assert!(e.contains("unsupported dtype '<c8' (complex)"), "{e}");
    // Not a zip at all.
    let e = err(b"definitely not a zip");
    assert!(e.contains("not a readable .npz archive"), "{e}");
}

#[test]
fn a_member_is_read_on_demand_by_key() {
    let bytes = npz_with(
        "k.npy",
        &npy("{'descr': '<i4', 'fortran_order': False, 'shape': (), }", &7i32.to_le_bytes()),
    );
    let mut f = NpzFile::from_reader(std::io::Cursor::new(bytes), PathBuf::from("m.npz")).unwrap();
    assert_eq!(f.keys(), ["k"]);
    assert_eq!(f.read("k").unwrap().iter().copied().collect::<Vec<_>>(), [7.0]);
    assert!(f.read("missing").unwrap_err().to_string().contains("m.npz member `missing`"));
}
