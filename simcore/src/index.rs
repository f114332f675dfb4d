//! A collection's vectors: fixed dimension, string ids, upsert, delete with
//! tombstones and compaction, optional persistence, and exact top-k search
//! (f32, or an int8 or sign-bit scan + exact f32 rescoring), filtered and
//! batched.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use memmap2::Mmap;

use crate::binary::{self, BitCodes, LANES};
use crate::error::{SimcoreError, check_finite};
use crate::file::{self, Batch, IndexFiles, Loaded, META_BYTES};
use crate::kernels::{Kernels, QueryI8};
use crate::quant;
use crate::topk::{Hit, TopK};

/// Rows scored per kernel call: the score buffer lives on the stack.
const BLOCK: usize = 256;
/// Below this many bytes to read, one thread scans alone: handing work to the
/// pool costs more than it saves (measured: 10k x 384 f32 (15 MB) gains from
/// two threads, its 4 MB int8 copy does not).
pub(crate) const PARALLEL_MIN_BYTES: usize = 8 << 20;
/// Rows a batch search scores against every query before moving on: 512 rows
/// of 384 f32 (768 KiB) stay in a 1 MiB L2 while each query passes over them.
const BATCH_BLOCK_BYTES: usize = 768 * 1024;

/// How a search scores rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Exact f32 inner products over every row.
    Exact,
    /// int8 scan keeping `k × oversample` candidates, then exact f32 rescoring.
    Int8 { oversample: usize },
    /// Sign-bit (Hamming) scan keeping `k × oversample` candidates, then exact
    /// f32 rescoring. Needs `Index::build_binary` first.
    Binary { oversample: usize },
}

/// Counts returned by an upsert.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UpsertStats {
    pub inserted: usize,
    pub replaced: usize,
}

/// A file-backed index keeps rows appended since its files were mapped in
/// memory up to this many bytes of f32 rows, then maps the files again.
const REMAP_TAIL_BYTES: usize = 64 << 20;

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

/// Rows in two parts: the mapped file as it was opened, then rows added since.
struct Rows<T: Copy + 'static> {
    base: Option<Mmap>,
    base_rows: usize,
    tail: Vec<T>,
    stride: usize,
}

impl<T: Copy + 'static> Rows<T> {
    fn new(stride: usize) -> Self {
        Self {
            base: None,
            base_rows: 0,
            tail: Vec::new(),
            stride,
        }
    }

    /// Rows `0..rows` read from a map of their file, nothing in memory.
    fn mapped(map: Mmap, rows: usize, stride: usize) -> Self {
        Self {
            base: Some(map),
            base_rows: rows,
            tail: Vec::new(),
            stride,
        }
    }

    fn base_slice(&self, view: fn(&[u8]) -> &[T]) -> &[T] {
        self.base.as_deref().map_or(&[], view)
    }

    /// Contiguous runs of rows: (values, first row, row count).
    fn parts(&self, view: fn(&[u8]) -> &[T]) -> [(&[T], usize, usize); 2] {
        let tail_rows = self.tail.len() / self.stride;
        [
            (self.base_slice(view), 0, self.base_rows),
            (&self.tail, self.base_rows, tail_rows),
        ]
    }

    /// Calls `f(rows, first_row, n)` for consecutive blocks of at most `block`
    /// rows covering `lo..hi`.
    fn blocks(
        &self,
        view: fn(&[u8]) -> &[T],
        lo: usize,
        hi: usize,
        block: usize,
        mut f: impl FnMut(&[T], usize, usize),
    ) {
        for (values, first, count) in self.parts(view) {
            let (start, end) = (lo.max(first), hi.min(first + count));
            let mut r = start;
            while r < end {
                let n = block.min(end - r);
                let from = (r - first) * self.stride;
                f(&values[from..from + n * self.stride], r, n);
                r += n;
            }
        }
    }

    fn row(&self, view: fn(&[u8]) -> &[T], r: usize) -> &[T] {
        if r < self.base_rows {
            &self.base_slice(view)[r * self.stride..(r + 1) * self.stride]
        } else {
            let t = r - self.base_rows;
            &self.tail[t * self.stride..(t + 1) * self.stride]
        }
    }
}

fn view_f32(b: &[u8]) -> &[f32] {
    file::as_f32(b)
}

fn view_i8(b: &[u8]) -> &[i8] {
    file::as_i8(b)
}

/// Encoded form of a batch of new rows (`f32` borrows the batch's own
/// values when rows need no padding).
struct Encoded<'a> {
    f32: Cow<'a, [f32]>,
    i8: Vec<i8>,
    scales: Vec<f32>,
    sums: Vec<i32>,
    meta: Vec<u8>,
}

pub struct Index {
    dim: usize,
    stride_f32: usize,
    stride_i8: usize,
    f32: Rows<f32>,
    i8: Rows<i8>,
    scales: Vec<f32>,
    sums: Vec<i32>,
    ids: Vec<String>,
    lookup: HashMap<String, u32>,
    deleted: Vec<bool>,
    n_deleted: usize,
    /// In a mutex so that an upsert can be staged (appended to the files)
    /// with shared access while searches go on.
    files: Option<(PathBuf, Mutex<IndexFiles>)>,
    /// An upsert in the files, not yet in memory (`stage_upsert`, `publish`).
    staged: Mutex<Option<Staged>>,
    threads: usize,
    /// Sign-bit codes of every row, kept in memory only (derived from the f32
    /// rows): built on request, then maintained by upserts and compactions.
    bits: Option<BitCodes>,
    /// Counts the changes to the rows; a prepared compaction is installed
    /// only over the state it was built from.
    changes: u64,
}

/// A batch appended to the files (durable) that searches do not see yet.
struct Staged {
    ids: Vec<String>,
    enc: Encoded<'static>,
    replaced: Vec<u32>,
    /// the files mapped again after the append (past REMAP_TAIL_BYTES)
    remapped: Option<(Mmap, Mmap)>,
    changes: u64,
}

fn staged_error() -> SimcoreError {
    SimcoreError::Invalid("an upsert is staged and not yet published".into())
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn inner<T>(m: &mut Mutex<T>) -> &mut T {
    m.get_mut().unwrap_or_else(|e| e.into_inner())
}

/// The live rows rewritten without tombstones, built while searches go on
/// (`Index::prepare_compaction`, read access) and installed by
/// `Index::finish_compaction` (write access, brief).
pub struct Compaction {
    changes: u64,
    rows: Prepared,
    bits: Option<BitCodes>,
}

enum Prepared {
    /// an in-memory index's live rows, encoded
    InMemory {
        ids: Vec<String>,
        enc: Encoded<'static>,
    },
    /// a persistent index's new generation, written and synced, not yet current
    OnDisk { generation: String },
}

impl Index {
    /// An empty in-memory index.
    pub fn new(dim: usize) -> Result<Index, SimcoreError> {
        if dim == 0 || dim > 65_536 {
            return Err(SimcoreError::Invalid(format!(
                "dimension must be 1..=65536, got {dim}"
            )));
        }
        let (stride_f32, stride_i8) = (round_up(dim, 16), round_up(dim, 64));
        Ok(Index {
            dim,
            stride_f32,
            stride_i8,
            f32: Rows::new(stride_f32),
            i8: Rows::new(stride_i8),
            scales: Vec::new(),
            sums: Vec::new(),
            ids: Vec::new(),
            lookup: HashMap::new(),
            deleted: Vec::new(),
            n_deleted: 0,
            files: None,
            staged: Mutex::new(None),
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            bits: None,
            changes: 0,
        })
    }

    /// Create an empty persistent index in directory `root`.
    pub fn create(root: &Path, dim: usize) -> Result<Index, SimcoreError> {
        let mut index = Index::new(dim)?;
        let files = IndexFiles::create(
            root,
            dim as u32,
            index.stride_f32 as u32,
            index.stride_i8 as u32,
        )
        .map_err(|e| io_error(root, e))?;
        index.files = Some((root.to_path_buf(), Mutex::new(files)));
        Ok(index)
    }

    /// Open the persistent index in `root`.
    pub fn open(root: &Path) -> Result<Index, SimcoreError> {
        let (files, loaded) = IndexFiles::open(root).map_err(|e| io_error(root, e))?;
        let mut index = Index::new(loaded.header.dim as usize)?;
        if index.stride_f32 != loaded.header.stride_f32 as usize
            || index.stride_i8 != loaded.header.stride_i8 as usize
        {
            return Err(SimcoreError::Invalid(format!(
                "{}: unsupported row strides",
                root.display()
            )));
        }
        index.load(loaded);
        index.files = Some((root.to_path_buf(), Mutex::new(files)));
        Ok(index)
    }

    fn load(&mut self, loaded: Loaded) {
        let rows = loaded.header.rows as usize;
        self.f32 = Rows::mapped(loaded.f32, rows, self.stride_f32);
        self.i8 = Rows::mapped(loaded.i8, rows, self.stride_i8);
        self.scales = loaded
            .meta
            .chunks_exact(META_BYTES)
            .map(|c| f32::from_le_bytes(c[..4].try_into().unwrap()))
            .collect();
        self.sums = loaded
            .meta
            .chunks_exact(META_BYTES)
            .map(|c| i32::from_le_bytes(c[4..].try_into().unwrap()))
            .collect();
        self.deleted = vec![false; rows];
        for &r in &loaded.deleted {
            self.deleted[r as usize] = true;
        }
        self.n_deleted = self.deleted.iter().filter(|&&d| d).count();
        self.lookup = HashMap::with_capacity(rows - self.n_deleted);
        for (r, id) in loaded.ids.iter().enumerate() {
            if !self.deleted[r] {
                self.lookup.insert(id.clone(), r as u32);
            }
        }
        self.ids = loaded.ids;
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Live (not deleted) vectors.
    pub fn len(&self) -> usize {
        self.lookup.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lookup.is_empty()
    }

    /// Stored rows including tombstones (what a scan reads).
    pub fn rows(&self) -> usize {
        self.ids.len()
    }

    pub fn deleted_rows(&self) -> usize {
        self.n_deleted
    }

    pub fn path(&self) -> Option<&Path> {
        self.files.as_ref().map(|(p, _)| p.as_path())
    }

    /// Bytes an exact scan and an int8 scan read (rows × padded stride).
    pub fn scan_bytes(&self) -> (usize, usize) {
        (
            self.rows() * self.stride_f32 * 4,
            self.rows() * self.stride_i8,
        )
    }

    pub fn set_threads(&mut self, threads: usize) {
        self.threads = threads.max(1);
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    pub fn contains(&self, id: &str) -> bool {
        self.lookup.contains_key(id)
    }

    /// The live row holding `id`.
    pub fn row_of(&self, id: &str) -> Option<u32> {
        self.lookup.get(id).copied()
    }

    pub fn id_of(&self, row: usize) -> &str {
        &self.ids[row]
    }

    /// The stored f32 vector of `id`.
    pub fn get(&self, id: &str) -> Option<Vec<f32>> {
        let r = *self.lookup.get(id)? as usize;
        Some(self.f32.row(view_f32, r)[..self.dim].to_vec())
    }

    /// Build the sign-bit codes of every row (reads every f32 row once);
    /// a no-op when they exist.
    pub fn build_binary(&mut self) {
        if self.bits.is_none() {
            self.bits = Some(self.codes_of((0..self.rows()).map(|r| self.f32.row(view_f32, r))));
        }
    }

    /// Whether the sign-bit codes are built.
    pub fn has_binary(&self) -> bool {
        self.bits.is_some()
    }

    /// Bytes the sign-bit codes hold in memory (0 when not built).
    pub fn binary_bytes(&self) -> usize {
        self.bits.as_ref().map_or(0, BitCodes::bytes)
    }

    fn codes_of<'a>(&self, rows: impl Iterator<Item = &'a [f32]>) -> BitCodes {
        let mut bits = BitCodes::new(self.dim);
        for row in rows {
            bits.push(&row[..self.dim]);
        }
        bits
    }

    fn check_vectors(&self, n: usize, values: &[f32]) -> Result<(), SimcoreError> {
        if n == 0 {
            return Ok(());
        }
        if values.len() != n * self.dim {
            return Err(SimcoreError::DimensionMismatch {
                expected: self.dim,
                got: values.len() / n,
            });
        }
        check_finite(values, "vectors")
    }

    fn owned(enc: Encoded<'_>) -> Encoded<'static> {
        Encoded {
            f32: Cow::Owned(enc.f32.into_owned()),
            i8: enc.i8,
            scales: enc.scales,
            sums: enc.sums,
            meta: enc.meta,
        }
    }

    fn encode<'a>(&self, values: &'a [f32], n: usize) -> Encoded<'a> {
        let f32 = if self.stride_f32 == self.dim {
            Cow::Borrowed(values)
        } else {
            let mut padded = vec![0.0; n * self.stride_f32];
            for (row, v) in padded
                .chunks_exact_mut(self.stride_f32)
                .zip(values.chunks_exact(self.dim))
            {
                row[..self.dim].copy_from_slice(v);
            }
            Cow::Owned(padded)
        };
        let mut enc = Encoded {
            f32,
            i8: vec![0; n * self.stride_i8],
            scales: Vec::with_capacity(n),
            sums: Vec::with_capacity(n),
            meta: Vec::with_capacity(n * META_BYTES),
        };
        for (codes, v) in enc
            .i8
            .chunks_exact_mut(self.stride_i8)
            .zip(values.chunks_exact(self.dim))
        {
            let (scale, sum) = quant::max_scale_into(v, &mut codes[..self.dim]);
            enc.scales.push(scale);
            enc.sums.push(sum);
            enc.meta.extend_from_slice(&scale.to_le_bytes());
            enc.meta.extend_from_slice(&sum.to_le_bytes());
        }
        enc
    }

    /// Insert or replace vectors by id (`values` is `ids.len() × dim`, row-major).
    /// The batch is validated as a whole first; with persistence it is durable
    /// when this returns. `stage_upsert` then `publish`, in one call.
    pub fn upsert<S: AsRef<str>>(
        &mut self,
        ids: &[S],
        values: &[f32],
    ) -> Result<UpsertStats, SimcoreError> {
        let ids = ids.iter().map(|id| id.as_ref().to_owned()).collect();
        self.stage_upsert(ids, values.to_vec())?;
        Ok(self.publish().expect("an upsert was just staged"))
    }

    /// The first half of an upsert, with shared access only (searches go on):
    /// the batch validated, encoded and, with persistence, appended to the
    /// files and synced (durable) — but not visible until `publish`. Until
    /// then nothing else may change the index: another stage, a delete or a
    /// compaction is refused.
    pub fn stage_upsert(&self, ids: Vec<String>, values: Vec<f32>) -> Result<(), SimcoreError> {
        let mut staged = locked(&self.staged);
        if staged.is_some() {
            return Err(staged_error());
        }
        self.check_vectors(ids.len(), &values)?;
        let mut seen = HashSet::with_capacity(ids.len());
        for id in &ids {
            if !seen.insert(id.as_str()) {
                return Err(SimcoreError::Invalid(format!(
                    "duplicate id {:?} in one batch",
                    id
                )));
            }
        }
        drop(seen);
        if self.rows() + ids.len() > u32::MAX as usize {
            return Err(SimcoreError::Invalid("index is full (2^32 rows)".into()));
        }
        let Encoded {
            f32,
            i8,
            scales,
            sums,
            meta,
        } = self.encode(&values, ids.len());
        let padded = match f32 {
            Cow::Owned(rows) => Some(rows),
            Cow::Borrowed(_) => None,
        };
        let enc = Encoded {
            f32: Cow::Owned(padded.unwrap_or(values)),
            i8,
            scales,
            sums,
            meta,
        };
        let replaced: Vec<u32> = ids
            .iter()
            .filter_map(|id| self.lookup.get(id.as_str()).copied())
            .collect();
        let mut remapped = None;
        if let Some((root, files)) = self.files.as_ref() {
            let mut files = locked(files);
            let id_bytes = file::encode_ids(ids.iter().map(String::as_str));
            let batch = Batch {
                rows: ids.len(),
                f32: &enc.f32,
                i8: &enc.i8,
                meta: &enc.meta,
                ids: &id_bytes,
                deleted: &replaced,
            };
            files.append(&batch).map_err(|e| io_error(root, e))?;
            // the rows are in the files now: past REMAP_TAIL_BYTES, map them instead of
            // keeping a second copy (grown by copies) in memory
            if (self.f32.tail.len() + enc.f32.len()) * 4 >= REMAP_TAIL_BYTES {
                remapped = Some(files.map_rows().map_err(|e| io_error(root, e))?);
            }
        }
        *staged = Some(Staged {
            ids,
            enc,
            replaced,
            remapped,
            changes: self.changes,
        });
        Ok(())
    }

    /// The second half of an upsert, with exclusive access (brief: memory
    /// only): the staged batch becomes visible. None when nothing is staged.
    pub fn publish(&mut self) -> Option<UpsertStats> {
        let staged = inner(&mut self.staged).take()?;
        debug_assert_eq!(staged.changes, self.changes, "nothing changes while staged");
        let Staged {
            ids,
            enc,
            replaced,
            remapped,
            ..
        } = staged;
        for &r in &replaced {
            self.deleted[r as usize] = true;
        }
        self.n_deleted += replaced.len();
        let first = self.rows();
        let n = ids.len();
        if let Some(bits) = self.bits.as_mut() {
            for row in enc.f32.chunks_exact(self.stride_f32) {
                bits.push(&row[..self.dim]);
            }
        }
        for (i, id) in ids.into_iter().enumerate() {
            self.lookup.insert(id.clone(), (first + i) as u32);
            self.ids.push(id);
        }
        self.deleted.resize(self.ids.len(), false);
        match remapped {
            Some((f32_map, i8_map)) => {
                self.f32 = Rows::mapped(f32_map, self.rows(), self.stride_f32);
                self.i8 = Rows::mapped(i8_map, self.rows(), self.stride_i8);
            }
            None => {
                self.f32.tail.extend_from_slice(&enc.f32);
                self.i8.tail.extend_from_slice(&enc.i8);
            }
        }
        self.scales.extend_from_slice(&enc.scales);
        self.sums.extend_from_slice(&enc.sums);
        self.changes += 1;
        Some(UpsertStats {
            inserted: n - replaced.len(),
            replaced: replaced.len(),
        })
    }

    /// True while a staged upsert waits for `publish`.
    pub fn has_staged(&self) -> bool {
        locked(&self.staged).is_some()
    }

    fn refuse_if_staged(&mut self) -> Result<(), SimcoreError> {
        match inner(&mut self.staged) {
            Some(_) => Err(staged_error()),
            None => Ok(()),
        }
    }

    /// Delete ids; returns which were present. Durable when it returns.
    pub fn delete<S: AsRef<str>>(&mut self, ids: &[S]) -> Result<Vec<bool>, SimcoreError> {
        let mut rows = Vec::new();
        let mut found = Vec::with_capacity(ids.len());
        let mut seen = HashSet::new();
        for id in ids {
            let row = self
                .lookup
                .get(id.as_ref())
                .copied()
                .filter(|_| seen.insert(id.as_ref()));
            found.push(row.is_some());
            rows.extend(row);
        }
        if rows.is_empty() {
            return Ok(found);
        }
        self.refuse_if_staged()?;
        if let Some((root, files)) = self.files.as_mut() {
            let files = inner(files);
            let batch = Batch {
                rows: 0,
                f32: &[],
                i8: &[],
                meta: &[],
                ids: &[],
                deleted: &rows,
            };
            files.append(&batch).map_err(|e| io_error(root, e))?;
        }
        for r in rows {
            self.deleted[r as usize] = true;
            self.lookup.remove(&self.ids[r as usize]);
            self.n_deleted += 1;
        }
        self.changes += 1;
        Ok(found)
    }

    /// Rewrite storage without tombstones (a new file generation when persistent).
    pub fn compact(&mut self) -> Result<(), SimcoreError> {
        let prepared = self.prepare_compaction()?;
        self.finish_compaction(prepared).map(|_| ())
    }

    /// The expensive half of a compaction, with read access only: the live
    /// rows encoded again and, when persistent, written and synced as a new
    /// generation that is not yet current. One at a time per index: two
    /// would write the same generation.
    pub fn prepare_compaction(&self) -> Result<Compaction, SimcoreError> {
        if self.has_staged() {
            return Err(staged_error());
        }
        let live: Vec<usize> = (0..self.rows()).filter(|&r| !self.deleted[r]).collect();
        let mut values = Vec::with_capacity(live.len() * self.dim);
        for &r in &live {
            values.extend_from_slice(&self.f32.row(view_f32, r)[..self.dim]);
        }
        let ids: Vec<String> = live.iter().map(|&r| self.ids[r].clone()).collect();
        let enc = self.encode(&values, live.len());
        let bits = self
            .bits
            .as_ref()
            .map(|_| self.codes_of(values.chunks_exact(self.dim)));
        let Some((root, files)) = self.files.as_ref() else {
            return Ok(Compaction {
                changes: self.changes,
                rows: Prepared::InMemory {
                    ids,
                    enc: Self::owned(enc),
                },
                bits,
            });
        };
        let id_bytes = file::encode_ids(ids.iter().map(String::as_str));
        let batch = Batch {
            rows: live.len(),
            f32: &enc.f32,
            i8: &enc.i8,
            meta: &enc.meta,
            ids: &id_bytes,
            deleted: &[],
        };
        let generation = locked(files)
            .write_compacted(root, &batch)
            .map_err(|e| io_error(root, e))?;
        Ok(Compaction {
            changes: self.changes,
            rows: Prepared::OnDisk { generation },
            bits,
        })
    }

    /// Install a prepared compaction: switch to its generation (atomic
    /// rename) or its rows. Returns false, changing nothing, when the index
    /// changed after it was prepared (its generation is removed).
    pub fn finish_compaction(&mut self, prepared: Compaction) -> Result<bool, SimcoreError> {
        if prepared.changes != self.changes || inner(&mut self.staged).is_some() {
            if let (Prepared::OnDisk { generation }, Some((root, _))) =
                (&prepared.rows, &self.files)
            {
                IndexFiles::discard(root, generation).map_err(|e| io_error(root, e))?;
            }
            return Ok(false);
        }
        match (prepared.rows, self.files.as_mut()) {
            (Prepared::OnDisk { generation }, Some((root, files))) => {
                let (new_files, loaded) =
                    IndexFiles::switch_to(root, &generation).map_err(|e| io_error(root, e))?;
                *inner(files) = new_files;
                self.load(loaded);
            }
            (Prepared::InMemory { ids, enc }, None) => {
                let rows = ids.len();
                self.f32 = Rows {
                    base: None,
                    base_rows: 0,
                    tail: enc.f32.into_owned(),
                    stride: self.stride_f32,
                };
                self.i8 = Rows {
                    base: None,
                    base_rows: 0,
                    tail: enc.i8,
                    stride: self.stride_i8,
                };
                self.scales = enc.scales;
                self.sums = enc.sums;
                self.lookup = ids
                    .iter()
                    .enumerate()
                    .map(|(r, id)| (id.clone(), r as u32))
                    .collect();
                self.ids = ids;
                self.deleted = vec![false; rows];
                self.n_deleted = 0;
            }
            _ => {
                return Err(SimcoreError::Invalid(
                    "a compaction prepared for another kind of index".into(),
                ));
            }
        }
        self.bits = prepared.bits;
        self.changes += 1;
        Ok(true)
    }

    /// Read every stored f32 value once with `threads` threads and return
    /// their sum: the memory-bandwidth baseline a scan is measured against.
    pub fn read_baseline(&self, threads: usize) -> f32 {
        let kernels = Kernels::get();
        let mut total = 0.0;
        for (values, _, _) in self.f32.parts(view_f32) {
            let threads = threads.max(1);
            let chunk = values.len().div_ceil(threads).next_multiple_of(16).max(16);
            let parts: Vec<&[f32]> = values.chunks(chunk).collect();
            total += parallel(parts.len(), |i| (kernels.sum_f32)(parts[i]))
                .into_iter()
                .sum::<f32>();
        }
        total
    }

    fn check_query(&self, q: &[f32]) -> Result<(), SimcoreError> {
        if q.len() != self.dim {
            return Err(SimcoreError::DimensionMismatch {
                expected: self.dim,
                got: q.len(),
            });
        }
        check_finite(q, "query")
    }

    fn threads_for(&self, rows: usize, bytes_per_row: usize) -> usize {
        if rows * bytes_per_row < PARALLEL_MIN_BYTES {
            1
        } else {
            self.threads.min(rows / BLOCK).max(1)
        }
    }

    /// Exact top-k (or int8 + rescore) over all live rows, or only over
    /// `allow` (row numbers; cost is proportional to their count).
    pub fn search(
        &self,
        q: &[f32],
        k: usize,
        mode: Mode,
        allow: Option<&[u32]>,
    ) -> Result<Vec<Hit>, SimcoreError> {
        let found = self.candidates(q, k, mode, allow)?;
        Ok(match mode {
            Mode::Exact => found,
            Mode::Int8 { .. } | Mode::Binary { .. } => self.rescore(Kernels::get(), q, k, found),
        })
    }

    /// The candidates an int8 or binary search rescores — the best
    /// `k × oversample` by the approximate score, best first, each with that
    /// score and its exact one (the same values `search` ranks them by) — so
    /// that a collection split over several indexes can pick the candidates
    /// and the top k exactly as one index would. Exact mode: the top k, both
    /// scores exact.
    pub fn rescorable(
        &self,
        q: &[f32],
        k: usize,
        mode: Mode,
        allow: Option<&[u32]>,
    ) -> Result<Vec<(Hit, f32)>, SimcoreError> {
        let found = self.candidates(q, k, mode, allow)?;
        let kernels = Kernels::get();
        Ok(found
            .into_iter()
            .map(|hit| match mode {
                Mode::Exact => (hit, hit.score),
                Mode::Int8 { .. } | Mode::Binary { .. } => (
                    hit,
                    (kernels.dot_f32)(q, &self.f32.row(view_f32, hit.row)[..self.dim]),
                ),
            })
            .collect())
    }

    /// Exact top-k, or the approximate modes' best `k × oversample` by their
    /// approximate score (before rescoring).
    fn candidates(
        &self,
        q: &[f32],
        k: usize,
        mode: Mode,
        allow: Option<&[u32]>,
    ) -> Result<Vec<Hit>, SimcoreError> {
        self.check_query(q)?;
        if let Some(rows) = allow
            && let Some(&bad) = rows.iter().find(|&&r| r as usize >= self.rows())
        {
            return Err(SimcoreError::Invalid(format!(
                "allowed row {bad} out of range (rows: {})",
                self.rows()
            )));
        }
        let kernels = Kernels::get();
        Ok(match mode {
            Mode::Exact => self.collect(allow, k, self.stride_f32 * 4, |lo, hi, top| {
                self.scan_f32(kernels, q, lo, hi, allow, top)
            }),
            Mode::Int8 { oversample } => {
                let (codes, _) = quant::max_scale(q);
                let qi = QueryI8::new(codes);
                let wide = k.saturating_mul(oversample.max(1));
                self.collect(allow, wide, self.stride_i8, |lo, hi, top| {
                    self.scan_i8(kernels, &qi, lo, hi, allow, top)
                })
            }
            Mode::Binary { oversample } => {
                let Some(bits) = self.bits.as_ref() else {
                    return Err(SimcoreError::Invalid(
                        "binary search needs the sign-bit codes: build them first".into(),
                    ));
                };
                let qw = binary::sign_words(q, bits.words());
                let wide = k.saturating_mul(oversample.max(1));
                self.collect(allow, wide, bits.words() * 8, |lo, hi, top| {
                    self.scan_bits(kernels, bits, &qw, lo, hi, allow, top)
                })
            }
        })
    }

    /// The best `k` of `candidates` by exact f32 inner product.
    fn rescore(&self, kernels: &Kernels, q: &[f32], k: usize, candidates: Vec<Hit>) -> Vec<Hit> {
        let mut best = TopK::new(k);
        for hit in candidates {
            best.push(
                (kernels.dot_f32)(q, &self.f32.row(view_f32, hit.row)[..self.dim]),
                hit.row,
            );
        }
        best.into_sorted()
    }

    /// Run `scan(lo, hi, top)` over the rows (or over positions of `allow`),
    /// split across threads when large enough, and merge.
    fn collect<F>(&self, allow: Option<&[u32]>, k: usize, bytes_per_row: usize, scan: F) -> Vec<Hit>
    where
        F: Fn(usize, usize, &mut TopK) + Sync,
    {
        let n = allow.map_or(self.rows(), <[u32]>::len);
        let threads = self.threads_for(n, bytes_per_row);
        if threads <= 1 {
            let mut top = TopK::new(k);
            scan(0, n, &mut top);
            return top.into_sorted();
        }
        let chunk = n.div_ceil(threads);
        let scan = &scan;
        let parts: Vec<TopK> = parallel(threads, |t| {
            let mut top = TopK::new(k);
            scan((t * chunk).min(n), ((t + 1) * chunk).min(n), &mut top);
            top
        });
        let mut merged = TopK::new(k);
        for part in parts {
            merged.merge(part);
        }
        merged.into_sorted()
    }

    fn scan_f32(
        &self,
        kernels: &Kernels,
        q: &[f32],
        lo: usize,
        hi: usize,
        allow: Option<&[u32]>,
        top: &mut TopK,
    ) {
        if let Some(rows) = allow {
            return self.push_allowed(&rows[lo..hi], top, |r| {
                (kernels.dot_f32)(q, &self.f32.row(view_f32, r)[..self.dim])
            });
        }
        let mut buf = [0.0f32; BLOCK];
        self.f32.blocks(view_f32, lo, hi, BLOCK, |slab, first, n| {
            (kernels.dots_f32)(q, slab, self.stride_f32, &mut buf[..n]);
            self.push_live(top, &buf[..n], first);
        });
    }

    fn scan_i8(
        &self,
        kernels: &Kernels,
        q: &QueryI8,
        lo: usize,
        hi: usize,
        allow: Option<&[u32]>,
        top: &mut TopK,
    ) {
        if let Some(rows) = allow {
            return self.push_allowed(&rows[lo..hi], top, |r| {
                let dot = (kernels.dot_i8)(q, &self.i8.row(view_i8, r)[..self.dim], self.sums[r]);
                dot as f32 * self.scales[r]
            });
        }
        let (mut dots, mut buf) = ([0i32; BLOCK], [0.0f32; BLOCK]);
        self.i8.blocks(view_i8, lo, hi, BLOCK, |slab, first, n| {
            self.approx_scores(kernels, q, slab, first, &mut dots[..n], &mut buf[..n]);
            self.push_live(top, &buf[..n], first);
        });
    }

    /// Rows `lo..hi` (or positions `lo..hi` of `allow`) by Hamming distance of
    /// their sign bits to the query's (score: minus the distance).
    #[allow(clippy::too_many_arguments)]
    fn scan_bits(
        &self,
        kernels: &Kernels,
        bits: &BitCodes,
        qw: &[u64],
        lo: usize,
        hi: usize,
        allow: Option<&[u32]>,
        top: &mut TopK,
    ) {
        if let Some(rows) = allow {
            return self.push_allowed(&rows[lo..hi], top, |r| -(bits.distance(qw, r) as f32));
        }
        // Rows come in increasing order, so once k are held a row must be
        // strictly nearer than the worst kept one (a tie loses on row order):
        // one integer comparison per row instead of a heap offer.
        let bound = |top: &TopK| {
            let floor = top.floor();
            if floor == f32::NEG_INFINITY {
                u32::MAX
            } else {
                (-floor) as u32
            }
        };
        let mut worst = bound(top);
        let mut dist = [0u32; BLOCK];
        let mut start = lo - lo % LANES; // kernels read whole blocks of 8 rows
        while start < hi {
            let n = BLOCK.min((hi - start).next_multiple_of(LANES));
            bits.distances(kernels, qw, start, &mut dist[..n]);
            let (from, to) = (lo.max(start), hi.min(start + n));
            let nearest = dist[from - start..to - start]
                .iter()
                .fold(u32::MAX, |m, &d| m.min(d));
            if worst != u32::MAX && nearest >= worst {
                start += n;
                continue; // the usual block: nothing in it can enter
            }
            for r in from..to {
                let d = dist[r - start];
                if (d < worst || worst == u32::MAX) && (self.n_deleted == 0 || !self.deleted[r]) {
                    top.push(-(d as f32), r);
                    worst = bound(top);
                }
            }
            start += n;
        }
    }

    /// Offer the live rows among `rows` (an allow-list's share) to `top`,
    /// each scored by `score(row)`.
    fn push_allowed(&self, rows: &[u32], top: &mut TopK, score: impl Fn(usize) -> f32) {
        for &r in rows {
            let r = r as usize;
            if !self.deleted[r] {
                top.push(score(r), r);
            }
        }
    }

    /// Offer a block's scores (rows `first..`) to `top`, skipping deleted rows.
    #[inline]
    fn push_live(&self, top: &mut TopK, scores: &[f32], first: usize) {
        if self.n_deleted == 0 {
            for (j, &score) in scores.iter().enumerate() {
                top.push(score, first + j);
            }
        } else {
            for (j, &score) in scores.iter().enumerate() {
                if !self.deleted[first + j] {
                    top.push(score, first + j);
                }
            }
        }
    }

    /// int8 scores of a block scaled back to the rows' magnitude (the query's
    /// own scale is left out: it does not change the order).
    #[inline]
    fn approx_scores(
        &self,
        kernels: &Kernels,
        q: &QueryI8,
        slab: &[i8],
        first: usize,
        dots: &mut [i32],
        out: &mut [f32],
    ) {
        let n = out.len();
        (kernels.dots_i8)(q, slab, self.stride_i8, &self.sums[first..first + n], dots);
        for ((o, &dot), &scale) in out
            .iter_mut()
            .zip(dots.iter())
            .zip(&self.scales[first..first + n])
        {
            *o = dot as f32 * scale;
        }
    }

    /// Top-k for many queries (`queries` is `nq × dim`) in one pass over the
    /// rows: each block of rows is scored against every query while it sits in
    /// L2. Rows are split across threads.
    pub fn search_batch(
        &self,
        queries: &[f32],
        k: usize,
        mode: Mode,
    ) -> Result<Vec<Vec<Hit>>, SimcoreError> {
        if queries.is_empty() {
            return Ok(Vec::new());
        }
        if !queries.len().is_multiple_of(self.dim) {
            return Err(SimcoreError::DimensionMismatch {
                expected: self.dim,
                got: queries.len(),
            });
        }
        check_finite(queries, "queries")?;
        if let Mode::Binary { .. } = mode {
            // the codes are small: one pass per query costs little next to rescoring
            return queries
                .chunks_exact(self.dim)
                .map(|q| self.search(q, k, mode, None))
                .collect();
        }
        let kernels = Kernels::get();
        let qs: Vec<&[f32]> = queries.chunks_exact(self.dim).collect();
        let rows = self.rows();
        let threads = if rows * self.stride_f32 * 4 * qs.len() < PARALLEL_MIN_BYTES {
            1
        } else {
            self.threads.min(rows.div_ceil(BLOCK)).max(1)
        };
        let chunk = rows.div_ceil(threads);
        let per_thread = |lo: usize, hi: usize| -> Vec<TopK> {
            match mode {
                Mode::Exact => self.batch_f32(kernels, &qs, k, lo, hi),
                Mode::Int8 { oversample } => {
                    self.batch_i8(kernels, &qs, k.saturating_mul(oversample.max(1)), lo, hi)
                }
                Mode::Binary { .. } => unreachable!("answered per query above"),
            }
        };
        let mut parts: Vec<Vec<TopK>> = if threads == 1 {
            vec![per_thread(0, rows)]
        } else {
            parallel(threads, |t| {
                per_thread((t * chunk).min(rows), ((t + 1) * chunk).min(rows))
            })
        };
        let mut merged: Vec<TopK> = parts.remove(0);
        for part in parts {
            for (m, p) in merged.iter_mut().zip(part) {
                m.merge(p);
            }
        }
        Ok(match mode {
            Mode::Exact => merged.into_iter().map(TopK::into_sorted).collect(),
            Mode::Int8 { .. } | Mode::Binary { .. } => merged
                .into_iter()
                .zip(&qs)
                .map(|(cands, q)| self.rescore(kernels, q, k, cands.into_sorted()))
                .collect(),
        })
    }

    fn batch_f32(
        &self,
        kernels: &Kernels,
        qs: &[&[f32]],
        k: usize,
        lo: usize,
        hi: usize,
    ) -> Vec<TopK> {
        let mut tops: Vec<TopK> = qs.iter().map(|_| TopK::new(k)).collect();
        let block = (BATCH_BLOCK_BYTES / (self.stride_f32 * 4)).clamp(1, BLOCK);
        let mut buf = [0.0f32; BLOCK];
        self.f32.blocks(view_f32, lo, hi, block, |slab, first, n| {
            for (q, top) in qs.iter().zip(tops.iter_mut()) {
                (kernels.dots_f32)(q, slab, self.stride_f32, &mut buf[..n]);
                self.push_live(top, &buf[..n], first);
            }
        });
        tops
    }

    fn batch_i8(
        &self,
        kernels: &Kernels,
        qs: &[&[f32]],
        k: usize,
        lo: usize,
        hi: usize,
    ) -> Vec<TopK> {
        let qis: Vec<QueryI8> = qs
            .iter()
            .map(|q| QueryI8::new(quant::max_scale(q).0))
            .collect();
        let mut tops: Vec<TopK> = qs.iter().map(|_| TopK::new(k)).collect();
        let block = (BATCH_BLOCK_BYTES / self.stride_i8).clamp(1, BLOCK);
        let (mut dots, mut buf) = ([0i32; BLOCK], [0.0f32; BLOCK]);
        self.i8.blocks(view_i8, lo, hi, block, |slab, first, n| {
            for (q, top) in qis.iter().zip(tops.iter_mut()) {
                self.approx_scores(kernels, q, slab, first, &mut dots[..n], &mut buf[..n]);
                self.push_live(top, &buf[..n], first);
            }
        });
        tops
    }
}

/// Run `f(0..parts)` on the shared thread pool (no thread start-up per call)
/// and return the results in order.
fn parallel<T: Send>(parts: usize, f: impl Fn(usize) -> T + Sync + Send) -> Vec<T> {
    use rayon::prelude::*;
    (0..parts).into_par_iter().map(f).collect()
}

fn io_error(path: &Path, err: io::Error) -> SimcoreError {
    SimcoreError::Io(format!("{}: {err}", path.display()))
}
