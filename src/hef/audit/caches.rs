//! KV-cache checks: read/write pairs per cache id, one ring length everywhere, ids and layouts
//! shared by prefill and tbt (cache_manager.cpp/hpp, finding 9).

use std::collections::BTreeSet;

use super::{Auditor, RingLength};
use crate::hef::finding::{Finding, Severity};
use crate::hef::model::{dtype_name, CacheLayer, NetworkGroup};

impl Auditor<'_> {
    pub(super) fn check_caches(&mut self) {
        let groups: Vec<&NetworkGroup> = [self.prefill, self.tbt].into_iter().flatten().collect();
        let mut rings = Vec::new();
        for g in &groups {
            self.check_cache_pairs(g);
            rings.extend(ring_lengths(g));
        }
        self.check_ring_lengths(&rings);
        let ids = |g: Option<&NetworkGroup>| {
            g.map(|g| cache_ids(g).into_iter().collect::<Vec<u32>>()).unwrap_or_default()
        };
        self.cache_summary.prefill_ids = ids(self.prefill);
        self.cache_summary.tbt_ids = ids(self.tbt);
        self.cache_summary.ring_lengths = rings;
        if let (Some(p), Some(t)) = (self.prefill, self.tbt) {
            let shared = self.cache_summary.prefill_ids == self.cache_summary.tbt_ids;
            self.cache_summary.shared = Some(shared);
            if !shared {
                let msg = format!(
                    "prefill cache ids {:?} differ from tbt cache ids {:?}; caches are shared by id, so tbt would read caches prefill never wrote",
                    self.cache_summary.prefill_ids, self.cache_summary.tbt_ids
                );
                self.push(Finding::new("cache-ids-differ", Severity::Error, msg).table(9));
            }
            self.check_cache_layouts(p, t);
        }
    }

    /// Per cache id the read (H2D) and write (D2H) layers must both exist with equal entry sizes
    /// (`CacheInfo::create`, cache_manager.hpp:33-44).
    fn check_cache_pairs(&mut self, g: &NetworkGroup) {
        for id in cache_ids(g) {
            let (read, write): (Vec<&CacheLayer>, Vec<&CacheLayer>) =
                g.caches.iter().filter(|c| c.cache_id == id).partition(|c| c.is_input);
            let (Some(r), Some(w)) = (read.first(), write.first()) else {
                let side = if read.is_empty() { "read (H2D)" } else { "write (D2H)" };
                let msg = format!(
                    "cache id {id} has no {side} layer; HailoRT requires matching input and output cache ids"
                );
                self.push(Finding::new("cache-unpaired", Severity::Error, msg).in_group(&g.name));
                continue;
            };
            if r.padded.features != w.padded.features {
                let msg = format!(
                    "cache id {id}: read `{}` entries are {} bytes but write `{}` entries are {}; HailoRT requires equal entry sizes",
                    r.name, r.padded.features, w.name, w.padded.features
                );
                self.push(Finding::new("cache-entry-size", Severity::Error, msg).in_group(&g.name));
            }
        }
    }

    /// Every cache's ring (read entries + write entries) must have one length across all caches
    /// and groups (cache_manager.cpp), and genai's mask assumes it is kv_cache_size.
    fn check_ring_lengths(&mut self, rings: &[RingLength]) {
        let lengths: BTreeSet<u64> = rings.iter().map(|r| r.entries).collect();
        if lengths.len() > 1 {
            let list: Vec<String> =
                rings.iter().map(|r| format!("{} id {}: {}", r.group, r.cache_id, r.entries)).collect();
            let msg = format!(
                "cache rings differ in length ({}); HailoRT requires one length (HAILO_INVALID_ARGUMENT)",
                list.join(", ")
            );
            self.push(Finding::new("cache-ring-length", Severity::Error, msg));
        }
        let kv = u64::from(self.params.pre_process_params.kv_cache_size);
        if let Some(&len) = lengths.iter().next().filter(|_| lengths.len() == 1) {
            if len != kv {
                let msg = format!("the cache ring holds {len} entries but kv_cache_size is {kv}; the mask's columns would not line up with cache slots");
                self.push(Finding::new("cache-ring-vs-kv", Severity::Warning, msg));
            }
        }
    }

    /// Finding 9: prefill and tbt must lay each shared cache out the same way.
    fn check_cache_layouts(&mut self, p: &NetworkGroup, t: &NetworkGroup) {
        for a in &p.caches {
            let Some(b) = t.caches.iter().find(|b| b.cache_id == a.cache_id && b.is_input == a.is_input)
            else {
                continue;
            };
            if a.order != b.order || a.padded.features != b.padded.features || a.data_bytes != b.data_bytes {
                let msg = format!(
                    "cache id {} ({}) is {} {} × {} in prefill (`{}`) but {} {} × {} in tbt (`{}`); the shared ring would be read in another layout than written",
                    a.cache_id,
                    if a.is_input { "read" } else { "write" },
                    a.order,
                    a.padded.features,
                    dtype_name(a.data_bytes),
                    a.name,
                    b.order,
                    b.padded.features,
                    dtype_name(b.data_bytes),
                    b.name
                );
                self.push(Finding::new("cache-layout", Severity::Error, msg).table(9));
            }
        }
    }
}

fn cache_ids(g: &NetworkGroup) -> BTreeSet<u32> {
    g.caches.iter().map(|c| c.cache_id).collect()
}

/// Ring entries per cache id: hw h × w of the read layer plus that of the write layer.
fn ring_lengths(g: &NetworkGroup) -> Vec<RingLength> {
    cache_ids(g)
        .into_iter()
        .map(|id| RingLength {
            group: g.name.clone(),
            cache_id: id,
            entries: g.caches.iter().filter(|c| c.cache_id == id).map(|c| c.padded.rows()).sum(),
        })
        .collect()
}
