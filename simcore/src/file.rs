//! On-disk format of a persistent index, crash-safe appends, mmap load.
//!
//! An index directory holds `CURRENT` (the name of the live generation) and
//! one generation directory with six files:
//!
//! | file      | content                                                      |
//! |-----------|--------------------------------------------------------------|
//! | `header`  | two 128-byte header slots (at 0 and 4096), see [`Header`]    |
//! | `f32`     | rows of `stride_f32` little-endian f32 (zero padded)         |
//! | `i8`      | the same rows max-scale quantized, `stride_i8` bytes each     |
//! | `meta`    | per row: scale (f32) and sum of the int8 codes (i32)         |
//! | `ids`     | per row: id length (u32) and UTF-8 bytes                     |
//! | `deleted` | row numbers (u32) deleted or replaced since the generation   |
//!
//! Appends write data first at the committed ends of the data files, fsync
//! them, then commit by writing a new header (sequence + 1, CRC-32) into the
//! older slot and fsyncing it. On open the valid slot with the highest
//! sequence wins and every data file is cut back to its committed length, so a
//! torn tail from a crash is dropped; a header whose CRC fails is ignored, and
//! if neither slot is valid the open fails with a clear error. Compaction
//! writes a whole new generation and switches `CURRENT` by atomic rename.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

pub const MAGIC: &[u8; 8] = b"SIMCORE\0";
pub const VERSION: u32 = 1;
/// Vectors are stored as f32 with an int8 companion.
pub const DTYPE_F32_I8: u32 = 1;
const SLOT_BYTES: usize = 128;
const SLOT_OFFSETS: [u64; 2] = [0, 4096];
pub const META_BYTES: usize = 8;

const FILES: [&str; 5] = ["f32", "i8", "meta", "ids", "deleted"];

/// Committed state of a generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Header {
    pub dim: u32,
    pub stride_f32: u32,
    pub stride_i8: u32,
    pub rows: u64,
    pub ids_bytes: u64,
    pub deleted: u64,
    pub seq: u64,
}

impl Header {
    fn encode(&self) -> [u8; SLOT_BYTES] {
        let mut b = [0u8; SLOT_BYTES];
        b[0..8].copy_from_slice(MAGIC);
        let words = [
            VERSION,
            DTYPE_F32_I8,
            self.dim,
            self.stride_f32,
            self.stride_i8,
        ];
        for (i, w) in words.iter().enumerate() {
            b[8 + 4 * i..12 + 4 * i].copy_from_slice(&w.to_le_bytes());
        }
        let longs = [self.rows, self.ids_bytes, self.deleted, self.seq];
        for (i, l) in longs.iter().enumerate() {
            b[32 + 8 * i..40 + 8 * i].copy_from_slice(&l.to_le_bytes());
        }
        let crc = crc32fast::hash(&b[..SLOT_BYTES - 4]);
        b[SLOT_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Header> {
        if b.len() < SLOT_BYTES || &b[0..8] != MAGIC {
            return None;
        }
        let crc = u32::from_le_bytes(b[SLOT_BYTES - 4..SLOT_BYTES].try_into().ok()?);
        if crc != crc32fast::hash(&b[..SLOT_BYTES - 4]) {
            return None;
        }
        let word = |i: usize| u32::from_le_bytes(b[8 + 4 * i..12 + 4 * i].try_into().unwrap());
        let long = |i: usize| u64::from_le_bytes(b[32 + 8 * i..40 + 8 * i].try_into().unwrap());
        if word(0) != VERSION || word(1) != DTYPE_F32_I8 {
            return None;
        }
        Some(Header {
            dim: word(2),
            stride_f32: word(3),
            stride_i8: word(4),
            rows: long(0),
            ids_bytes: long(1),
            deleted: long(2),
            seq: long(3),
        })
    }

    fn lengths(&self) -> [u64; 5] {
        [
            self.rows * u64::from(self.stride_f32) * 4,
            self.rows * u64::from(self.stride_i8),
            self.rows * META_BYTES as u64,
            self.ids_bytes,
            self.deleted * 4,
        ]
    }
}

/// What `open` reads back.
pub struct Loaded {
    pub header: Header,
    pub f32: Mmap,
    pub i8: Mmap,
    pub meta: Vec<u8>,
    pub ids: Vec<String>,
    pub deleted: Vec<u32>,
}

/// Open handles on a generation, positioned at its committed state.
pub struct IndexFiles {
    dir: PathBuf,
    header_file: File,
    data: [File; 5],
    header: Header,
}

fn corrupt(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

fn open_rw(path: &Path, create: bool) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn generation_dir(root: &Path) -> io::Result<PathBuf> {
    let name = fs::read_to_string(root.join("CURRENT"))?;
    let name = name.trim();
    if name.is_empty() || name.contains('/') {
        return Err(corrupt(format!(
            "{}: CURRENT names no generation",
            root.display()
        )));
    }
    Ok(root.join(name))
}

fn next_generation_name(root: &Path) -> String {
    let current = fs::read_to_string(root.join("CURRENT")).unwrap_or_default();
    let n: u64 = current
        .trim()
        .strip_prefix("gen-")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    format!("gen-{}", n + 1)
}

/// Point `CURRENT` at `name` atomically, then remove other generations.
fn switch_generation(root: &Path, name: &str) -> io::Result<()> {
    let tmp = root.join("CURRENT.tmp");
    {
        let mut f = File::create(&tmp)?;
        f.write_all(name.as_bytes())?;
        f.sync_all()?;
    }
    fs::rename(&tmp, root.join("CURRENT"))?;
    sync_dir(root)?;
    for entry in fs::read_dir(root)? {
        let entry = entry?;
        let file_name = entry.file_name();
        let other = file_name.to_string_lossy();
        if other.starts_with("gen-") && other != name {
            fs::remove_dir_all(entry.path())?;
        }
    }
    Ok(())
}

impl IndexFiles {
    /// Create an empty index in `root` (which must not hold one already).
    pub fn create(
        root: &Path,
        dim: u32,
        stride_f32: u32,
        stride_i8: u32,
    ) -> io::Result<IndexFiles> {
        fs::create_dir_all(root)?;
        if root.join("CURRENT").exists() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} already holds an index", root.display()),
            ));
        }
        let header = Header {
            dim,
            stride_f32,
            stride_i8,
            ..Header::default()
        };
        let name = next_generation_name(root);
        let files = Self::write_generation(root, &name, header, |_| Ok(()))?;
        switch_generation(root, &name)?;
        Ok(files)
    }

    /// Write a complete new generation directory whose data `fill` provides
    /// (it receives the five data files in order); it is not yet current.
    fn write_generation(
        root: &Path,
        name: &str,
        header: Header,
        fill: impl FnOnce(&mut [File; 5]) -> io::Result<()>,
    ) -> io::Result<IndexFiles> {
        let dir = root.join(name);
        if dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        fs::create_dir_all(&dir)?;
        let mut opened = Vec::with_capacity(FILES.len());
        for f in FILES {
            opened.push(open_rw(&dir.join(f), true)?);
        }
        let mut data: [File; 5] = opened.try_into().expect("five data files");
        fill(&mut data)?;
        for f in &data {
            f.sync_all()?;
        }
        let header_file = open_rw(&dir.join("header"), true)?;
        let mut files = IndexFiles {
            dir: dir.clone(),
            header_file,
            data,
            header,
        };
        files.write_header(Header { seq: 1, ..header })?;
        files.write_header(Header { seq: 2, ..header })?;
        sync_dir(&dir)?;
        Ok(files)
    }

    fn write_header(&mut self, header: Header) -> io::Result<()> {
        let slot = SLOT_OFFSETS[(header.seq % 2) as usize];
        self.header_file.write_all_at(&header.encode(), slot)?;
        self.header_file.sync_data()?;
        self.header = header;
        Ok(())
    }

    /// Open the current generation: pick the newest valid header, drop any
    /// torn tail, map the vector files and read the small ones.
    pub fn open(root: &Path) -> io::Result<(IndexFiles, Loaded)> {
        let dir = generation_dir(root)?;
        let mut header_file = open_rw(&dir.join("header"), false)?;
        let mut raw = Vec::new();
        header_file.read_to_end(&mut raw)?;
        let header = SLOT_OFFSETS
            .iter()
            .filter_map(|&off| raw.get(off as usize..).and_then(Header::decode))
            .max_by_key(|h| h.seq)
            .ok_or_else(|| {
                corrupt(format!(
                    "{}: no valid header (corrupted index)",
                    dir.display()
                ))
            })?;
        let mut opened = Vec::with_capacity(FILES.len());
        for name in FILES {
            let path = dir.join(name);
            opened.push(
                open_rw(&path, false)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?,
            );
        }
        let data: [File; 5] = opened.try_into().expect("five data files");
        for ((file, want), name) in data.iter().zip(header.lengths()).zip(FILES) {
            let have = file.metadata()?.len();
            if have < want {
                return Err(corrupt(format!(
                    "{}/{name}: {have} bytes, header commits {want} (truncated index)",
                    dir.display()
                )));
            }
            if have > want {
                file.set_len(want)?; // torn tail of an uncommitted append
                file.sync_all()?;
            }
        }
        // SAFETY: the mapped ranges are committed data that this process only
        // ever appends after; compaction writes new files instead of rewriting.
        let f32_map = unsafe { Mmap::map(&data[0])? };
        // SAFETY: as above.
        let i8_map = unsafe { Mmap::map(&data[1])? };
        let meta = read_all(&data[2])?;
        let ids = parse_ids(&read_all(&data[3])?, header.rows)
            .ok_or_else(|| corrupt(format!("{}/ids: malformed id records", dir.display())))?;
        let deleted_raw = read_all(&data[4])?;
        let deleted = deleted_raw
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect::<Vec<_>>();
        if deleted.iter().any(|&r| u64::from(r) >= header.rows) {
            return Err(corrupt(format!(
                "{}/deleted: row out of range",
                dir.display()
            )));
        }
        let files = IndexFiles {
            dir,
            header_file,
            data,
            header,
        };
        let loaded = Loaded {
            header,
            f32: f32_map,
            i8: i8_map,
            meta,
            ids,
            deleted,
        };
        Ok((files, loaded))
    }

    /// Fresh maps of the f32 and int8 row files as committed so far.
    pub fn map_rows(&self) -> io::Result<(Mmap, Mmap)> {
        // SAFETY: as in `open`: committed data, only ever appended after.
        let f32_map = unsafe { Mmap::map(&self.data[0])? };
        // SAFETY: as above.
        let i8_map = unsafe { Mmap::map(&self.data[1])? };
        Ok((f32_map, i8_map))
    }

    pub fn header(&self) -> Header {
        self.header
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Durably append rows and deletions; returns once committed.
    pub fn append(&mut self, batch: &Batch<'_>) -> io::Result<()> {
        let lengths = self.header.lengths();
        let parts: [&[u8]; 5] = [
            bytemuck_f32(batch.f32),
            bytemuck_i8(batch.i8),
            batch.meta,
            batch.ids,
            &batch
                .deleted
                .iter()
                .flat_map(|r| r.to_le_bytes())
                .collect::<Vec<u8>>(),
        ];
        for ((file, bytes), offset) in self.data.iter().zip(parts).zip(lengths) {
            if !bytes.is_empty() {
                file.write_all_at(bytes, offset)?;
            }
        }
        for (file, bytes) in self.data.iter().zip(parts) {
            if !bytes.is_empty() {
                file.sync_data()?;
            }
        }
        let h = self.header;
        self.write_header(Header {
            rows: h.rows + batch.rows as u64,
            ids_bytes: h.ids_bytes + batch.ids.len() as u64,
            deleted: h.deleted + batch.deleted.len() as u64,
            seq: h.seq + 1,
            ..h
        })
    }

    /// Write a new generation holding exactly `batch` (synced, not yet
    /// current) and return its name: the current one is untouched, so readers
    /// go on meanwhile and a crash leaves the index as it was.
    pub fn write_compacted(&self, root: &Path, batch: &Batch<'_>) -> io::Result<String> {
        let name = next_generation_name(root);
        let header = Header {
            rows: batch.rows as u64,
            ids_bytes: batch.ids.len() as u64,
            deleted: 0,
            seq: 0,
            ..self.header
        };
        Self::write_generation(root, &name, header, |files| {
            files[0].write_all(bytemuck_f32(batch.f32))?;
            files[1].write_all(bytemuck_i8(batch.i8))?;
            files[2].write_all(batch.meta)?;
            files[3].write_all(batch.ids)
        })?;
        Ok(name)
    }

    /// Make the written generation `name` current (atomic rename) and open it.
    pub fn switch_to(root: &Path, name: &str) -> io::Result<(IndexFiles, Loaded)> {
        switch_generation(root, name)?;
        Self::open(root)
    }

    /// Remove a written generation that will not become current.
    pub fn discard(root: &Path, name: &str) -> io::Result<()> {
        fs::remove_dir_all(root.join(name))
    }
}

/// One append: `rows` new rows (already padded to the strides) and deletions.
pub struct Batch<'a> {
    pub rows: usize,
    pub f32: &'a [f32],
    pub i8: &'a [i8],
    pub meta: &'a [u8],
    pub ids: &'a [u8],
    pub deleted: &'a [u32],
}

fn read_all(file: &File) -> io::Result<Vec<u8>> {
    let len = file.metadata()?.len() as usize;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, 0)?;
    Ok(buf)
}

fn parse_ids(raw: &[u8], rows: u64) -> Option<Vec<String>> {
    let mut ids = Vec::with_capacity(rows as usize);
    let mut pos = 0usize;
    while pos < raw.len() {
        let len = u32::from_le_bytes(raw.get(pos..pos + 4)?.try_into().ok()?) as usize;
        let bytes = raw.get(pos + 4..pos + 4 + len)?;
        ids.push(String::from_utf8(bytes.to_vec()).ok()?);
        pos += 4 + len;
    }
    (ids.len() as u64 == rows).then_some(ids)
}

/// Encode ids as the `ids` file's records.
pub fn encode_ids<'a>(ids: impl IntoIterator<Item = &'a str>) -> Vec<u8> {
    let mut out = Vec::new();
    for id in ids {
        out.extend_from_slice(&(id.len() as u32).to_le_bytes());
        out.extend_from_slice(id.as_bytes());
    }
    out
}

/// f32 values as their little-endian bytes (the only byte order supported).
pub fn bytemuck_f32(values: &[f32]) -> &[u8] {
    #[cfg(not(target_endian = "little"))]
    compile_error!("simcore's file format assumes a little-endian machine");
    // SAFETY: f32 has no padding and any byte pattern is a valid u8; the
    // length covers exactly the same memory.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
}

pub fn bytemuck_i8(values: &[i8]) -> &[u8] {
    // SAFETY: i8 and u8 have the same size and alignment.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), values.len()) }
}

/// View mapped bytes as f32 rows.
pub fn as_f32(bytes: &[u8]) -> &[f32] {
    assert!(
        bytes.as_ptr().align_offset(4) == 0 && bytes.len().is_multiple_of(4),
        "misaligned f32 data"
    );
    // SAFETY: alignment and length checked above; every bit pattern is a valid f32.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<f32>(), bytes.len() / 4) }
}

pub fn as_i8(bytes: &[u8]) -> &[i8] {
    // SAFETY: i8 and u8 have the same size and alignment.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<i8>(), bytes.len()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_crc() {
        let h = Header {
            dim: 3,
            stride_f32: 16,
            stride_i8: 64,
            rows: 5,
            ids_bytes: 30,
            deleted: 1,
            seq: 9,
        };
        let mut b = h.encode();
        assert_eq!(Header::decode(&b), Some(h));
        b[40] ^= 1;
        assert_eq!(Header::decode(&b), None);
    }

    #[test]
    fn ids_round_trip() {
        let raw = encode_ids(["a", "", "ünï"]);
        assert_eq!(parse_ids(&raw, 3).unwrap(), vec!["a", "", "ünï"]);
        assert!(parse_ids(&raw[..raw.len() - 1], 3).is_none());
    }
}
