//! CPU tests: the argument checks, `UniqueId`'s text forms, the element types, and what a
//! machine without NCCL is told.

use super::checks::{self, Shape};
use super::*;

#[test]
fn unique_ids_round_trip_through_hex_serde_and_bytes() {
    let mut bytes = [0u8; 128];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (i * 37 % 256) as u8;
    }
    let id = UniqueId::from_bytes(bytes);
    let hex = id.to_hex();
    assert_eq!(hex.len(), 256);
    assert_eq!(hex, id.to_string());
    assert_eq!(UniqueId::from_hex(&hex).unwrap(), id);
    assert_eq!(format!("  {hex}\n").parse::<UniqueId>().unwrap(), id);
    let json = serde_json::to_string(&id).unwrap();
    assert_eq!(json, format!("\"{hex}\""));
    assert_eq!(serde_json::from_str::<UniqueId>(&json).unwrap(), id);
    assert_eq!(id.as_bytes(), &bytes);
    assert_eq!(id.raw().internal.map(|c| c as u8), bytes);
}

#[test]
fn malformed_unique_ids_are_refused_with_what_was_wrong() {
    let e = UniqueId::from_hex("abcd").unwrap_err().to_string();
    assert!(e.contains("256 hex digits") && e.contains("not 4"), "{e}");
    let mut bad = "0".repeat(256);
    bad.replace_range(10..12, "zz");
    let e = UniqueId::from_hex(&bad).unwrap_err().to_string();
    assert!(e.contains("`zz` at position 10"), "{e}");
    let e = UniqueId::from_hex(&"é".repeat(128)).unwrap_err().to_string();
    assert!(e.contains("hex digits"), "{e}");
    assert!(serde_json::from_str::<UniqueId>("\"00\"").is_err());
    assert!(serde_json::from_str::<UniqueId>("42").is_err());
}

#[test]
fn element_types_map_to_nccl_types() {
    use cuda_sys::nccl::ncclDataType_t as D;
    fn of<T: NcclType>() -> (DataType, usize) {
        (T::DATA_TYPE, std::mem::size_of::<T>())
    }
    for ((t, size), raw) in [
        (of::<i8>(), D::ncclInt8),
        (of::<u8>(), D::ncclUint8),
        (of::<i32>(), D::ncclInt32),
        (of::<u32>(), D::ncclUint32),
        (of::<i64>(), D::ncclInt64),
        (of::<u64>(), D::ncclUint64),
        (of::<half::f16>(), D::ncclFloat16),
        (of::<half::bf16>(), D::ncclBfloat16),
        (of::<f32>(), D::ncclFloat32),
        (of::<f64>(), D::ncclFloat64),
    ] {
        assert_eq!(t.raw(), raw, "{t:?}");
        assert_eq!(t.size(), size, "{t:?}");
    }
    assert_eq!(half::bf16::from_f64(0.5), half::bf16::from_f32(0.5));
    assert_eq!(<i32 as NcclType>::from_f64(-2.7), -2);
    let b = ops::scalar_bytes::<half::f16>(ReduceOp::PreMulSum(0.25));
    assert_eq!(&b[..2], bytemuck::bytes_of(&half::f16::from_f32(0.25)));
    assert_eq!(&b[2..], &[0; 6]);
    assert_eq!(ops::scalar_bytes::<f64>(ReduceOp::Sum), [0; 8]);
    assert!(ReduceOp::PreMulSum(2.0).builtin().is_none());
    assert_eq!(ReduceOp::Avg.builtin(), Some(cuda_sys::nccl::ncclRedOp_t::ncclAvg));
}

#[test]
fn ranks_roots_and_peers_are_checked() {
    assert!(checks::check_rank(0, 1).is_ok());
    assert!(checks::check_rank(1, 2).is_ok());
    let e = checks::check_rank(2, 2).unwrap_err().to_string();
    assert!(e.contains("rank 2 is out of range") && e.contains("0 to 1"), "{e}");
    assert!(checks::check_rank(0, 0).is_err());
    assert!(checks::check_rank(0, i32::MAX as usize + 1).is_err());
    let e = checks::check_peer("broadcast", "root", 3, 2).unwrap_err().to_string();
    assert!(e.contains("broadcast: root 3 is not a rank"), "{e}");
    assert!(checks::check_peer("send", "peer", 1, 2).is_ok());
}

#[test]
fn counts_must_match_what_each_collective_reads_and_writes() {
    use checks::collective_count as count;
    assert_eq!(count("all_reduce", Shape::Same, 8, 8, 4).unwrap(), 8);
    let e = count("all_reduce", Shape::Same, 8, 7, 4).unwrap_err().to_string();
    assert!(e.contains("8 elements and the receive data 7"), "{e}");
    assert_eq!(count("all_gather", Shape::Gather, 3, 12, 4).unwrap(), 3);
    let e = count("all_gather", Shape::Gather, 3, 11, 4).unwrap_err().to_string();
    assert!(e.contains("times the 4 ranks (12)"), "{e}");
    assert!(count("all_gather", Shape::Gather, usize::MAX, 0, 2)
        .unwrap_err()
        .to_string()
        .contains("overflows"));
    assert_eq!(count("reduce_scatter", Shape::Scatter, 12, 3, 4).unwrap(), 3);
    assert!(count("reduce_scatter", Shape::Scatter, 12, 4, 4).is_err());
    assert!(count("reduce_scatter", Shape::Scatter, 0, usize::MAX, 3).is_err());
    assert_eq!(checks::in_place_count("x", Shape::Same, 7, 2).unwrap(), 7);
    assert_eq!(checks::in_place_count("x", Shape::Gather, 8, 2).unwrap(), 4);
    let e = checks::in_place_count("all_gather_in_place", Shape::Gather, 7, 2)
        .unwrap_err()
        .to_string();
    assert!(e.contains("split evenly"), "{e}");
}

#[test]
fn overlapping_data_is_refused_unless_in_place() {
    use checks::check_overlap as overlap;
    // Disjoint, or empty.
    assert!(overlap("a", Shape::Same, (0, 16), (16, 16), 0, 16).is_ok());
    assert!(overlap("a", Shape::Same, (0, 0), (0, 16), 0, 0).is_ok());
    // Same start is all-reduce in place; shifted is not.
    assert!(overlap("a", Shape::Same, (64, 16), (64, 16), 0, 16).is_ok());
    let e = overlap("all_reduce", Shape::Same, (64, 16), (72, 16), 0, 16)
        .unwrap_err()
        .to_string();
    assert!(e.contains("overlap other than in place"), "{e}");
    // All-gather: the send data is this rank's part of the receive data.
    assert!(overlap("g", Shape::Gather, (1000 + 2 * 8, 8), (1000, 32), 2, 8).is_ok());
    assert!(overlap("g", Shape::Gather, (1000 + 8, 8), (1000, 32), 2, 8).is_err());
    // Reduce-scatter: the receive data is this rank's part of the send data.
    assert!(overlap("s", Shape::Scatter, (1000, 32), (1000 + 3 * 8, 8), 3, 8).is_ok());
    assert!(overlap("s", Shape::Scatter, (1000, 32), (1000, 8), 3, 8).is_err());
}

#[test]
fn a_machine_without_nccl_is_told_how_to_install_it() {
    // On a machine with NCCL (the GPU machines) this asks it for its version instead.
    match version() {
        Ok((major, _, _)) => assert!(major >= 2),
        Err(e) => {
            let text = e.to_string();
            assert!(text.contains("nvidia-nccl-cu13") && text.contains("NCCL"), "{text}");
        }
    }
}
