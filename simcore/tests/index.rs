//! Index behaviour: upsert/delete/compact, search modes, filters, batches,
//! persistence and crash recovery.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use simcore::error::SimcoreError;
use simcore::index::{Index, Mode};

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "simcore-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn vectors(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    (0..n * dim)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

fn ids(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("id-{i}")).collect()
}

/// Reference: exact scores sorted by (score desc, insertion order asc).
fn brute(index_vectors: &[(String, Vec<f32>)], q: &[f32], k: usize) -> Vec<String> {
    let mut scored: Vec<(f32, usize, &String)> = index_vectors
        .iter()
        .enumerate()
        .map(|(i, (id, v))| (v.iter().zip(q).map(|(a, b)| a * b).sum(), i, id))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored
        .into_iter()
        .take(k)
        .map(|(_, _, id)| id.clone())
        .collect()
}

/// A persistent index at `root` holding `data` as id-0.., the first `deleted` deleted.
fn with_deleted(root: &std::path::Path, dim: usize, data: &[f32], deleted: usize) -> Index {
    let mut index = Index::create(root, dim).unwrap();
    index.upsert(&ids(0..data.len() / dim), data).unwrap();
    index.delete(&ids(0..deleted)).unwrap();
    index
}

/// The exact inner product of row `row` of `data` with `q`.
fn exact_dot(data: &[f32], dim: usize, row: usize, q: &[f32]) -> f32 {
    data[row * dim..(row + 1) * dim]
        .iter()
        .zip(q)
        .map(|(a, b)| a * b)
        .sum()
}

fn hit_ids(index: &Index, hits: &[simcore::topk::Hit]) -> Vec<String> {
    hits.iter().map(|h| index.id_of(h.row).to_owned()).collect()
}

#[test]
fn exact_search_matches_brute_force() {
    let dim = 37;
    let mut index = Index::new(dim).unwrap();
    let data = vectors(500, dim, 1);
    let names = ids(0..500);
    index.upsert(&names, &data).unwrap();
    let reference: Vec<(String, Vec<f32>)> = names
        .iter()
        .cloned()
        .zip(data.chunks(dim).map(<[f32]>::to_vec))
        .collect();
    for (qi, q) in vectors(5, dim, 2).chunks(dim).enumerate() {
        let hits = index.search(q, 10, Mode::Exact, None).unwrap();
        assert_eq!(
            hit_ids(&index, &hits),
            brute(&reference, q, 10),
            "query {qi}"
        );
    }
}

#[test]
fn upsert_replaces_and_delete_hides() {
    let mut index = Index::new(4).unwrap();
    let stats = index
        .upsert(&["a", "b"], &[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0])
        .unwrap();
    assert_eq!((stats.inserted, stats.replaced), (2, 0));
    let stats = index.upsert(&["a"], &[0.0, 0.0, 1.0, 0.0]).unwrap();
    assert_eq!((stats.inserted, stats.replaced), (0, 1));
    assert_eq!(index.len(), 2);
    assert_eq!(index.rows(), 3);
    assert_eq!(index.get("a").unwrap(), vec![0.0, 0.0, 1.0, 0.0]);
    let hits = index
        .search(&[1.0, 0.0, 0.0, 0.0], 5, Mode::Exact, None)
        .unwrap();
    assert_eq!(hits.len(), 2, "the replaced row is not returned");
    assert_eq!(
        index.delete(&["b", "zzz", "b"]).unwrap(),
        vec![true, false, false]
    );
    assert_eq!(index.len(), 1);
    let hits = index
        .search(&[0.0, 1.0, 0.0, 0.0], 5, Mode::Exact, None)
        .unwrap();
    assert_eq!(hit_ids(&index, &hits), vec!["a"]);
    index.compact().unwrap();
    assert_eq!((index.len(), index.rows(), index.deleted_rows()), (1, 1, 0));
    assert_eq!(index.get("a").unwrap(), vec![0.0, 0.0, 1.0, 0.0]);
}

#[test]
fn bad_batches_change_nothing() {
    let mut index = Index::new(3).unwrap();
    index.upsert(&["a"], &[1.0, 2.0, 3.0]).unwrap();
    let dup = index.upsert(&["x", "x"], &[0.0; 6]).unwrap_err();
    assert!(dup.to_string().contains("duplicate id \"x\""));
    let nan = index.upsert(&["y"], &[0.0, f32::NAN, 0.0]).unwrap_err();
    assert!(matches!(nan, SimcoreError::NonFinite { index: 1, .. }));
    let dim = index.upsert(&["z"], &[0.0; 4]).unwrap_err();
    assert!(matches!(
        dim,
        SimcoreError::DimensionMismatch { expected: 3, .. }
    ));
    assert_eq!((index.len(), index.rows()), (1, 1));
}

#[test]
fn int8_rescored_search_recalls_exact_results() {
    let dim = 64;
    let mut index = Index::new(dim).unwrap();
    let data = vectors(5000, dim, 3);
    index.upsert(&ids(0..5000), &data).unwrap();
    let mut found = 0;
    let queries = vectors(20, dim, 4);
    for q in queries.chunks(dim) {
        let exact = index.search(q, 10, Mode::Exact, None).unwrap();
        let approx = index
            .search(q, 10, Mode::Int8 { oversample: 4 }, None)
            .unwrap();
        found += approx
            .iter()
            .filter(|h| exact.iter().any(|e| e.row == h.row))
            .count();
        // rescored scores are exact f32 scores
        for h in &approx {
            assert!((h.score - exact_dot(&data, dim, h.row, q)).abs() < 1e-4);
        }
    }
    assert!(found as f64 / 200.0 >= 0.99, "recall {found}/200");
}

#[test]
fn rescorable_candidates_are_what_search_ranks() {
    let dim = 64;
    let mut index = Index::new(dim).unwrap();
    let data = vectors(3000, dim, 5);
    index.upsert(&ids(0..3000), &data).unwrap();
    index.build_binary();
    for q in vectors(10, dim, 6).chunks(dim) {
        for (mode, wide) in [
            (Mode::Exact, 10),
            (Mode::Int8 { oversample: 4 }, 40),
            (Mode::Binary { oversample: 8 }, 80),
        ] {
            let found = index.rescorable(q, 10, mode, None).unwrap();
            assert_eq!(found.len(), wide);
            // best approximate first, each with its exact score
            assert!(found.windows(2).all(|w| w[0].0.score >= w[1].0.score));
            for (hit, exact) in &found {
                assert!((exact - exact_dot(&data, dim, hit.row, q)).abs() < 1e-4);
            }
            // search's top 10 are the candidates' 10 best exact scores, bit for bit
            let mut by_exact: Vec<(f32, usize)> = found.iter().map(|(h, e)| (*e, h.row)).collect();
            by_exact.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let searched = index.search(q, 10, mode, None).unwrap();
            let want: Vec<(f32, usize)> = searched.iter().map(|h| (h.score, h.row)).collect();
            assert_eq!(by_exact[..10], want[..]);
        }
    }
}

#[test]
fn filtered_search_only_returns_allowed_rows() {
    let dim = 8;
    let mut index = Index::new(dim).unwrap();
    index.upsert(&ids(0..100), &vectors(100, dim, 5)).unwrap();
    let allow: Vec<u32> = (0..100).filter(|r| r % 7 == 0).collect();
    let q = vectors(1, dim, 6);
    for mode in [Mode::Exact, Mode::Int8 { oversample: 3 }] {
        let hits = index.search(&q, 5, mode, Some(&allow)).unwrap();
        assert_eq!(hits.len(), 5);
        assert!(hits.iter().all(|h| h.row % 7 == 0));
    }
    assert!(index.search(&q, 5, Mode::Exact, Some(&[100])).is_err());
}

#[test]
fn batch_equals_single_searches_and_threads_agree() {
    let dim = 48;
    let mut index = Index::new(dim).unwrap();
    index
        .upsert(&ids(0..60_000), &vectors(60_000, dim, 7))
        .unwrap();
    index.delete(&["id-5", "id-77"]).unwrap();
    let queries = vectors(9, dim, 8);
    for mode in [Mode::Exact, Mode::Int8 { oversample: 4 }] {
        let batch = index.search_batch(&queries, 7, mode).unwrap();
        for (q, got) in queries.chunks(dim).zip(&batch) {
            let single = index.search(q, 7, mode, None).unwrap();
            assert_eq!(
                got.iter().map(|h| h.row).collect::<Vec<_>>(),
                single.iter().map(|h| h.row).collect::<Vec<_>>()
            );
        }
    }
    let q = &queries[..dim];
    let two = index.search(q, 20, Mode::Exact, None).unwrap();
    index.set_threads(1);
    let one = index.search(q, 20, Mode::Exact, None).unwrap();
    assert_eq!(two, one);
}

#[test]
fn k_larger_than_live_rows_returns_all_live() {
    let mut index = Index::new(2).unwrap();
    index
        .upsert(&["a", "b", "c"], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
        .unwrap();
    index.delete(&["b"]).unwrap();
    let hits = index.search(&[1.0, 1.0], 1000, Mode::Exact, None).unwrap();
    assert_eq!(hit_ids(&index, &hits), vec!["c", "a"]);
}

#[test]
fn persistent_index_survives_reopen() {
    let tmp = TempDir::new();
    let dim = 20;
    let data = vectors(300, dim, 9);
    {
        let mut index = Index::create(&tmp.0, dim).unwrap();
        index.upsert(&ids(0..200), &data[..200 * dim]).unwrap();
        index.upsert(&ids(200..300), &data[200 * dim..]).unwrap();
        index.delete(&["id-3"]).unwrap();
        index.upsert(&["id-4"], &data[..dim]).unwrap();
    }
    let index = Index::open(&tmp.0).unwrap();
    assert_eq!(index.len(), 299);
    assert!(!index.contains("id-3"));
    assert_eq!(index.get("id-4").unwrap(), data[..dim].to_vec());
    assert_eq!(
        index.get("id-250").unwrap(),
        data[250 * dim..251 * dim].to_vec()
    );
    let q = &data[10 * dim..11 * dim];
    let hits = index.search(q, 1, Mode::Exact, None).unwrap();
    assert_eq!(index.id_of(hits[0].row), "id-10");
    assert!(
        Index::create(&tmp.0, dim).is_err(),
        "create never overwrites"
    );
}

#[test]
fn compaction_survives_reopen_and_keeps_appending() {
    let tmp = TempDir::new();
    let dim = 16;
    let data = vectors(50, dim, 10);
    {
        let mut index = with_deleted(&tmp.0, dim, &data, 25);
        index.compact().unwrap();
        assert_eq!((index.len(), index.rows()), (25, 25));
        index.upsert(&["new"], &data[..dim]).unwrap();
    }
    let index = Index::open(&tmp.0).unwrap();
    assert_eq!((index.len(), index.rows()), (26, 26));
    assert_eq!(index.get("new").unwrap(), data[..dim].to_vec());
    assert_eq!(
        index.get("id-30").unwrap(),
        data[30 * dim..31 * dim].to_vec()
    );
    let gens: Vec<_> = fs::read_dir(&tmp.0)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("gen-"))
        .collect();
    assert_eq!(gens.len(), 1, "old generations are removed");
}

#[test]
fn a_prepared_compaction_leaves_the_index_as_it_was_until_installed() {
    let tmp = TempDir::new();
    let dim = 16;
    let data = vectors(40, dim, 12);
    let mut index = with_deleted(&tmp.0, dim, &data, 30);
    let before = generation(&tmp.0);
    let prepared = index.prepare_compaction().unwrap();
    // written aside: still the old generation and rows, searchable as before
    assert_eq!(generation(&tmp.0), before);
    assert_eq!((index.len(), index.rows()), (10, 40));
    let query = &data[35 * dim..36 * dim];
    let hits = index.search(query, 1, Mode::Exact, None).unwrap();
    assert_eq!(index.id_of(hits[0].row), "id-35");
    assert!(index.finish_compaction(prepared).unwrap());
    assert_ne!(generation(&tmp.0), before);
    assert_eq!((index.len(), index.rows()), (10, 10));
    let hits = index.search(query, 1, Mode::Exact, None).unwrap();
    assert_eq!(index.id_of(hits[0].row), "id-35");
}

#[test]
fn a_compaction_prepared_before_a_write_is_discarded() {
    let tmp = TempDir::new();
    let dim = 16;
    let data = vectors(40, dim, 13);
    {
        let mut index = with_deleted(&tmp.0, dim, &data, 30);
        let prepared = index.prepare_compaction().unwrap();
        index.delete(&ids(30..31)).unwrap();
        assert!(!index.finish_compaction(prepared).unwrap());
        assert_eq!((index.len(), index.rows()), (9, 40));
        let gens = fs::read_dir(&tmp.0)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("gen-"))
            .count();
        assert_eq!(gens, 1, "the discarded generation is removed");
        index.compact().unwrap();
        assert_eq!((index.len(), index.rows()), (9, 9));
    }
    let index = Index::open(&tmp.0).unwrap();
    assert_eq!(index.len(), 9);
    assert!(!index.contains("id-30"));
    assert_eq!(
        index.get("id-39").unwrap(),
        data[39 * dim..40 * dim].to_vec()
    );
}

#[test]
fn an_in_memory_compaction_prepared_before_a_write_is_discarded() {
    let dim = 8;
    let data = vectors(20, dim, 14);
    let mut index = Index::new(dim).unwrap();
    index.upsert(&ids(0..20), &data).unwrap();
    index.delete(&ids(0..10)).unwrap();
    let prepared = index.prepare_compaction().unwrap();
    index.upsert(&["late"], &data[..dim]).unwrap();
    assert!(!index.finish_compaction(prepared).unwrap());
    assert_eq!((index.len(), index.rows()), (11, 21));
    let prepared = index.prepare_compaction().unwrap();
    assert!(index.finish_compaction(prepared).unwrap());
    assert_eq!((index.len(), index.rows()), (11, 11));
    assert_eq!(index.get("late").unwrap(), data[..dim].to_vec());
}

fn generation(root: &std::path::Path) -> PathBuf {
    root.join(fs::read_to_string(root.join("CURRENT")).unwrap().trim())
}

#[test]
fn torn_tail_is_dropped_on_open() {
    let tmp = TempDir::new();
    let dim = 8;
    let data = vectors(10, dim, 11);
    {
        let mut index = Index::create(&tmp.0, dim).unwrap();
        index.upsert(&ids(0..10), &data).unwrap();
    }
    // A crash mid-append: data written past the committed length, header not updated.
    let gen_dir = generation(&tmp.0);
    for (name, junk) in [
        ("f32", 100usize),
        ("i8", 64),
        ("meta", 8),
        ("ids", 7),
        ("deleted", 4),
    ] {
        let mut f = OpenOptions::new()
            .append(true)
            .open(gen_dir.join(name))
            .unwrap();
        f.write_all(&vec![0xAB; junk]).unwrap();
    }
    let mut index = Index::open(&tmp.0).unwrap();
    assert_eq!(index.len(), 10);
    assert_eq!(index.get("id-9").unwrap(), data[9 * dim..].to_vec());
    // and appending after recovery works and persists
    index.upsert(&["after"], &data[..dim]).unwrap();
    drop(index);
    let index = Index::open(&tmp.0).unwrap();
    assert_eq!(index.len(), 11);
    assert_eq!(index.get("after").unwrap(), data[..dim].to_vec());
}

#[test]
fn one_corrupt_header_slot_falls_back_to_the_other() {
    let tmp = TempDir::new();
    let dim = 4;
    {
        let mut index = Index::create(&tmp.0, dim).unwrap();
        index.upsert(&["a"], &[1.0, 0.0, 0.0, 0.0]).unwrap(); // seq 3 → slot 1
        index.upsert(&["b"], &[0.0, 1.0, 0.0, 0.0]).unwrap(); // seq 4 → slot 0
    }
    let header = generation(&tmp.0).join("header");
    let mut bytes = fs::read(&header).unwrap();
    bytes[40] ^= 0xFF; // corrupt slot 0 (the newest)
    fs::write(&header, &bytes).unwrap();
    let index = Index::open(&tmp.0).unwrap();
    // the older commit is intact; the newer row's bytes are a torn tail now
    assert_eq!(index.len(), 1);
    assert!(index.contains("a"));
}

#[test]
fn fully_corrupt_or_truncated_files_are_errors_not_panics() {
    let tmp = TempDir::new();
    {
        let mut index = Index::create(&tmp.0, 4).unwrap();
        index.upsert(&["a", "b"], &[1.0; 8]).unwrap();
    }
    let gen_dir = generation(&tmp.0);
    let f32_file = gen_dir.join("f32");
    let len = fs::metadata(&f32_file).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&f32_file)
        .unwrap()
        .set_len(len - 4)
        .unwrap();
    let err = Index::open(&tmp.0)
        .err()
        .expect("truncated data must not open");
    assert!(err.to_string().contains("truncated index"), "{err}");

    fs::write(gen_dir.join("header"), vec![0u8; 8192]).unwrap();
    let err = Index::open(&tmp.0)
        .err()
        .expect("corrupt header must not open");
    assert!(err.to_string().contains("no valid header"), "{err}");

    assert!(Index::open(&tmp.0.join("missing")).is_err());
}

#[test]
fn binary_search_needs_its_codes_then_rescores_exactly() {
    let dim = 96;
    let mut index = Index::new(dim).unwrap();
    let data = vectors(3000, dim, 21);
    index.upsert(&ids(0..3000), &data).unwrap();
    let q = vectors(1, dim, 22);
    let binary = Mode::Binary { oversample: 10 };
    assert!(index.search(&q, 5, binary, None).is_err());
    index.build_binary();
    assert!(index.has_binary());
    assert_eq!(index.binary_bytes(), 3000 * 2 * 8); // 96 dims: 2 words a row
    // with every row a candidate, the binary search is the exact search
    let all = Mode::Binary { oversample: 3000 };
    let exact = index.search(&q, 10, Mode::Exact, None).unwrap();
    assert_eq!(index.search(&q, 10, all, None).unwrap(), exact);
    // scores are exact f32 scores whatever the oversampling
    for h in index.search(&q, 10, binary, None).unwrap() {
        assert!((h.score - exact_dot(&data, dim, h.row, &q)).abs() < 1e-4);
    }
}

#[test]
fn binary_codes_follow_upserts_deletes_filters_and_compaction() {
    let dir = TempDir::new();
    let dim = 70; // a partial last word
    let mut index = Index::create(&dir.0, dim).unwrap();
    let data = vectors(1000, dim, 23);
    index.upsert(&ids(0..1000), &data).unwrap();
    index.build_binary();
    let all = Mode::Binary {
        oversample: 100_000,
    };
    // rows added, replaced and deleted after the build
    index
        .upsert(&ids(1000..1013), &vectors(13, dim, 24))
        .unwrap();
    index.upsert(&ids(0..3), &vectors(3, dim, 25)).unwrap();
    index.delete(&["id-10", "id-1005"]).unwrap();
    let q = vectors(1, dim, 26);
    let exact = index.search(&q, 50, Mode::Exact, None).unwrap();
    assert_eq!(index.search(&q, 50, all, None).unwrap(), exact);
    let allow: Vec<u32> = (0..1016).filter(|r| r % 5 == 0).collect();
    let filtered = index.search(&q, 8, all, Some(&allow)).unwrap();
    assert_eq!(
        filtered,
        index.search(&q, 8, Mode::Exact, Some(&allow)).unwrap()
    );
    // threads split the rows at any boundary, not only whole blocks of 8
    index.set_threads(3);
    assert_eq!(index.search(&q, 50, all, None).unwrap(), exact);
    let exact_ids = hit_ids(&index, &exact);
    index.compact().unwrap();
    assert!(index.has_binary());
    let compacted = index.search(&q, 50, all, None).unwrap();
    assert_eq!(hit_ids(&index, &compacted), exact_ids);
    drop(index);
    // codes live in memory only: a reopened index builds them again on request
    let mut reopened = Index::open(&dir.0).unwrap();
    assert!(!reopened.has_binary());
    reopened.build_binary();
    let again = reopened.search(&q, 50, all, None).unwrap();
    assert_eq!(hit_ids(&reopened, &again), exact_ids);
    let index = reopened;
    let batch = index.search_batch(&vectors(4, dim, 27), 5, all).unwrap();
    assert_eq!(batch.len(), 4);
}

#[test]
fn appends_past_the_in_memory_tail_are_read_from_the_files() {
    // 64 MiB of f32 rows since the files were mapped: the index maps them
    // again instead of keeping a copy; searches, gets and reopen agree
    let tmp = TempDir::new();
    let dim = 1024;
    let (small, big) = (1_000, 16_000); // 4 MB, then 66 MB of f32 rows
    let data = vectors(small + big + 10, dim, 21);
    let names = ids(0..small + big + 10);
    let mut index = Index::create(&tmp.0, dim).unwrap();
    index.upsert(&names[..small], &data[..small * dim]).unwrap();
    index
        .upsert(
            &names[small..small + big],
            &data[small * dim..(small + big) * dim],
        )
        .unwrap();
    index
        .upsert(&names[small + big..], &data[(small + big) * dim..])
        .unwrap();
    index.upsert(&["id-5"], &data[7 * dim..8 * dim]).unwrap(); // a replacement
    let reference: Vec<(String, Vec<f32>)> = names
        .iter()
        .cloned()
        .zip(data.chunks(dim).map(<[f32]>::to_vec))
        .map(|(id, v)| {
            if id == "id-5" {
                (id, data[7 * dim..8 * dim].to_vec())
            } else {
                (id, v)
            }
        })
        .collect();
    let check = |index: &Index| {
        for row in [3, small + 17, small + big - 1, small + big + 9] {
            let q = &data[row * dim..(row + 1) * dim];
            let hits = index.search(q, 5, Mode::Exact, None).unwrap();
            assert_eq!(hit_ids(index, &hits), brute(&reference, q, 5), "row {row}");
            let int8 = index
                .search(q, 1, Mode::Int8 { oversample: 4 }, None)
                .unwrap();
            assert_eq!(hit_ids(index, &int8)[0], format!("id-{row}"));
            assert_eq!(index.get(&format!("id-{row}")).unwrap(), q.to_vec());
        }
        assert_eq!(index.get("id-5").unwrap(), data[7 * dim..8 * dim].to_vec());
        assert_eq!(index.len(), small + big + 10);
    };
    check(&index);
    drop(index);
    check(&Index::open(&tmp.0).unwrap());
}

#[test]
fn a_staged_upsert_is_durable_but_invisible_until_published() {
    let tmp = TempDir::new();
    let dim = 16;
    let data = vectors(30, dim, 21);
    {
        let mut index = Index::create(&tmp.0, dim).unwrap();
        index.upsert(&ids(0..20), &data[..20 * dim]).unwrap();
        // id-5 replaced, id-20..29 new
        let mut staged_ids = ids(20..30);
        staged_ids[0] = "id-5".into();
        index
            .stage_upsert(staged_ids, data[20 * dim..].to_vec())
            .unwrap();
        assert!(index.has_staged());
        assert_eq!((index.len(), index.rows()), (20, 20));
        assert!(!index.contains("id-21"));
        let q = &data[21 * dim..22 * dim];
        let hits = index.search(q, 3, Mode::Exact, None).unwrap();
        assert!(hits.iter().all(|h| index.id_of(h.row) != "id-21"));
        // nothing else may change the index meanwhile
        assert!(index.stage_upsert(ids(40..41), vectors(1, dim, 1)).is_err());
        assert!(index.delete(&ids(0..1)).is_err());
        assert!(index.upsert(&ids(41..42), &vectors(1, dim, 2)).is_err());
        assert!(index.prepare_compaction().is_err());
        let stats = index.publish().unwrap();
        assert_eq!((stats.inserted, stats.replaced), (9, 1));
        assert!(index.publish().is_none() && !index.has_staged());
        assert_eq!(
            (index.len(), index.rows(), index.deleted_rows()),
            (29, 30, 1)
        );
        assert_eq!(index.search(q, 1, Mode::Exact, None).unwrap()[0].row, 21);
        assert_eq!(
            index.get("id-5").unwrap(),
            data[20 * dim..21 * dim].to_vec()
        );
    }
    let index = Index::open(&tmp.0).unwrap();
    assert_eq!((index.len(), index.rows()), (29, 30));
}

#[test]
fn a_staged_upsert_is_in_the_files_before_it_is_published() {
    let tmp = TempDir::new();
    let dim = 16;
    let data = vectors(12, dim, 22);
    let index = Index::create(&tmp.0, dim).unwrap();
    index.stage_upsert(ids(0..12), data.clone()).unwrap();
    // a crash now: the files hold the batch (the caller's intent undoes it on restart)
    let reopened = Index::open(&tmp.0).unwrap();
    assert_eq!(reopened.len(), 12);
    assert_eq!(reopened.get("id-11").unwrap(), data[11 * dim..].to_vec());
    drop(index);
}
