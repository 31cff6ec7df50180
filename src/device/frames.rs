//! Host pre-processing of an LLM HEF, exactly as HailoRT's genai server does it
//! (hailort_server/genai/llm/pre_process.cpp, v5.2.0): the embeddings window, the position
//! window, RoPE tables from the HEF's theta tiled per head, and the attention mask. Pure
//! functions over plain arrays, tested against hand-worked frames.

/// The pre-processor's state (`LLMPreProcess`): windows of the last `p` rows and positions,
/// the tokens seen (`m_cache_usage_size`) and the position counter
/// (`m_current_timestamp_value`).
#[derive(Debug, Clone)]
pub struct PreProcess {
    /// `prefill_input_tokens_count`: rows of a prefill frame.
    pub p: usize,
    /// `kv_cache_size`: mask columns per head.
    pub kv: usize,
    pub heads: usize,
    pub kv_heads: usize,
    /// Features of one embeddings row.
    pub features: usize,
    /// `rope_theta_data.bin` as f32; L = theta.len() values per head.
    pub theta: Vec<f32>,
    /// The mask's "on" byte: 1.0 quantized with the prefill mask input's quant info.
    pub mask_on: u8,
    window_emb: Vec<u16>,
    window_pos: Vec<u32>,
    pub usage: usize,
    pub counter: u32,
}

/// One step's input frames, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Frames {
    /// T × features uint16 embeddings rows.
    pub embeddings: Vec<u16>,
    /// T × (kv · heads) uint8 mask.
    pub mask: Vec<u8>,
    /// T × heads × L, and T × kv_heads × L.
    pub q_cos: Vec<f32>,
    pub q_sin: Vec<f32>,
    pub k_cos: Vec<f32>,
    pub k_sin: Vec<f32>,
    /// The positions of the T rows (for records; the device never sees them).
    pub positions: Vec<u32>,
    pub rows: usize,
}

impl PreProcess {
    pub fn new(
        p: usize,
        kv: usize,
        heads: usize,
        kv_heads: usize,
        features: usize,
        theta: Vec<f32>,
        mask_on: u8,
    ) -> Self {
        PreProcess {
            p,
            kv,
            heads,
            kv_heads,
            features,
            theta,
            mask_on,
            // Upstream leaves both windows uninitialised (Eigen) and never clears them; zeros
            // here. Rows the mask leaves on for padding read them, nothing else does.
            window_emb: vec![0; p * features],
            window_pos: vec![0; p],
            usage: 0,
            counter: 0,
        }
    }

    /// `reset_local_cache`: a new conversation. The windows keep their contents.
    pub fn reset(&mut self) {
        self.usage = 0;
        self.counter = 0;
    }

    /// `update_cache_from_embeddings` and the position update: the windows shift up by n
    /// and the new rows and positions land at the bottom (pre_process.cpp:244-273).
    fn push(&mut self, rows: &[Vec<u16>]) {
        let (n, f) = (rows.len(), self.features);
        self.usage += n;
        self.window_emb.copy_within(n * f.., 0);
        self.window_pos.copy_within(n.., 0);
        for (i, row) in rows.iter().enumerate() {
            let slot = self.p - n + i;
            self.window_emb[slot * f..(slot + 1) * f].copy_from_slice(row);
            self.window_pos[slot] = self.counter;
            self.counter += 1;
        }
    }

    /// A prefill step of 1..=p rows: the whole window (older rows included).
    pub fn prefill(&mut self, rows: &[Vec<u16>]) -> Frames {
        assert!(!rows.is_empty() && rows.len() <= self.p, "the driver cuts chunks of at most p rows");
        self.push(rows);
        let positions = self.window_pos.clone();
        self.frames(self.window_emb.clone(), positions, (self.usage, self.kv))
    }

    /// A tbt step: one row, the window's last slot.
    pub fn tbt(&mut self, row: Vec<u16>) -> Frames {
        self.push(&[row]);
        let f = self.features;
        let emb = self.window_emb[(self.p - 1) * f..].to_vec();
        let pos = vec![self.window_pos[self.p - 1]];
        self.frames(emb, pos, (self.usage, self.kv))
    }

    /// A base-scope frame (a cache-less group run alone, re-run over the whole conversation at
    /// every step), as the exporter's `generate_base_scope.py` builds it
    /// (l-nmch/hailo-10h-llm-compiler runtime/diagnostics, 6cf9164a; `build_mask` in
    /// runtime_inputs.py f4fc4820): `frame` rows, the conversation's `rows` right-aligned after
    /// padding rows of `pad` (a zero embedding quantized: the input's zero point); positions 0 on
    /// the padding rows and 0, 1, … on the real ones; padding rows see every column, real row i
    /// the real columns up to its own. That is genai's mask for a prompt of `rows.len()` tokens
    /// in a frame of `frame` rows over `frame` slots, tiled per head alike.
    pub fn base_scope(&self, rows: &[Vec<u16>], frame: usize, pad: u16) -> Frames {
        let n = rows.len();
        assert!(n >= 1 && n <= frame, "the driver checks the conversation fits the frame");
        let mut embeddings = vec![pad; (frame - n) * self.features];
        rows.iter().for_each(|r| embeddings.extend_from_slice(r));
        let positions: Vec<u32> = std::iter::repeat_n(0, frame - n).chain(0..n as u32).collect();
        self.frames(embeddings, positions, (n, frame))
    }

    /// A tbt frame whose mask hides the whole cache: the token sees only its own slot (the
    /// last column), as the exporter's cache-free control does (`kv_greedy.py --mask-mode self`,
    /// 92914bb5). The conversation goes on as after [`PreProcess::tbt`].
    pub fn tbt_self(&mut self, row: Vec<u16>) -> Frames {
        let mut f = self.tbt(row);
        let kv = self.kv;
        for line in f.mask.chunks_mut(kv) {
            line.fill(0);
            line[kv - 1] = self.mask_on;
        }
        f
    }

    /// The frames of `positions` (one row each): their RoPE tables, and genai's mask after
    /// `usage` tokens over `kv` columns per head.
    fn frames(&self, embeddings: Vec<u16>, positions: Vec<u32>, (usage, kv): (usize, usize)) -> Frames {
        let mask = mask_frame(positions.len(), usage, kv, self.heads, self.mask_on);
        let (q_cos, q_sin) = rope_frame(&positions, &self.theta, self.heads);
        let (k_cos, k_sin) = rope_frame(&positions, &self.theta, self.kv_heads);
        Frames { embeddings, mask, q_cos, q_sin, k_cos, k_sin, rows: positions.len(), positions }
    }
}

/// cos/sin tables, T × heads × L (`angular_positional_embed`, `tile_along_last_axis`):
/// angle = theta[c] · float(pos) in float32, then cosf/sinf; each token's L values repeated
/// once per head.
pub fn rope_frame(positions: &[u32], theta: &[f32], heads: usize) -> (Vec<f32>, Vec<f32>) {
    let l = theta.len();
    let mut cos = Vec::with_capacity(positions.len() * heads * l);
    let mut sin = Vec::with_capacity(positions.len() * heads * l);
    for &p in positions {
        let row: Vec<f32> = theta.iter().map(|&t| t * p as f32).collect();
        for _ in 0..heads {
            cos.extend(row.iter().map(|a| a.cos()));
            sin.extend(row.iter().map(|a| a.sin()));
        }
    }
    (cos, sin)
}

/// The uint8 mask, T rows × (kv · heads) columns (`prepare_attention_mask_input`,
/// pre_process.cpp:133-174). `usage` counts the tokens seen including this step's. With
/// U = min(usage, kv), R = min(U, T), B = T − R padding rows: padding rows are all on; valid
/// row i has columns [0, kv−U) off, [kv−U, kv−R) on (tokens already in the cache) and
/// [kv−R, kv−R+i] on (causal among this frame's rows). Head block 0 is copied to every head.
pub fn mask_frame(t: usize, usage: usize, kv: usize, heads: usize, on: u8) -> Vec<u8> {
    let u = usage.min(kv);
    let r = u.min(t);
    let b = t - r;
    let mut block0 = vec![0u8; t * kv];
    for row in 0..t {
        let line = &mut block0[row * kv..(row + 1) * kv];
        if row < b {
            line.fill(on);
            continue;
        }
        let i = row - b;
        line[kv - u..kv - r].fill(on);
        line[kv - r..=kv - r + i].fill(on);
    }
    block0.chunks(kv).flat_map(|row| row.repeat(heads)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ON: u8 = 255;

    /// Block 0 of a mask frame as rows of 0/1.
    fn block0(m: &[u8], t: usize, kv: usize, heads: usize) -> Vec<Vec<u8>> {
        (0..t)
            .map(|r| m[r * kv * heads..r * kv * heads + kv].iter().map(|&b| u8::from(b == ON)).collect())
            .collect()
    }

    #[test]
    fn base_scope_frame_right_aligns_the_conversation_after_zero_point_rows() {
        let pre = PreProcess::new(4, 8, 2, 1, 2, vec![0.5, 1.0], ON);
        let rows = vec![vec![7, 8], vec![9, 10]];
        let f = pre.base_scope(&rows, 4, 3);
        assert_eq!(f.rows, 4);
        assert_eq!(f.embeddings, vec![3, 3, 3, 3, 7, 8, 9, 10], "padding rows hold the zero point");
        assert_eq!(f.positions, vec![0, 0, 0, 1], "padding at 0, real rows from 0");
        // Padding rows see everything; real row i sees the real columns up to its own.
        assert_eq!(
            block0(&f.mask, 4, 4, 2),
            vec![vec![1, 1, 1, 1], vec![1, 1, 1, 1], vec![0, 0, 1, 0], vec![0, 0, 1, 1]]
        );
        assert_eq!(f.mask.len(), 4 * 4 * 2, "frame rows × frame columns × heads");
        // Q tables per head (2), K per kv head (1): the last row is position 1.
        assert_eq!(f.q_cos.len(), 4 * 2 * 2);
        assert_eq!(f.k_sin[3 * 2..], [0.5f32.sin(), 1.0f32.sin()]);
        // A full frame has no padding: row 0 sees only itself.
        let full = pre.base_scope(&[vec![1, 1], vec![2, 2], vec![3, 3], vec![4, 4]], 4, 3);
        assert_eq!(block0(&full.mask, 4, 4, 2)[0], vec![1, 0, 0, 0]);
        assert_eq!(full.positions, vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_self_masked_tbt_frame_sees_only_its_own_slot() {
        let mut pre = PreProcess::new(4, 6, 2, 1, 1, vec![1.0], ON);
        pre.prefill(&[vec![1], vec![2], vec![3]]);
        let f = pre.tbt_self(vec![4]);
        assert_eq!(block0(&f.mask, 1, 6, 2), vec![vec![0, 0, 0, 0, 0, 1]]);
        assert_eq!(f.mask[6..], f.mask[..6], "every head alike");
        assert_eq!(f.positions, vec![3], "the token keeps its real position");
        assert_eq!(pre.usage, 4, "the conversation goes on");
    }

    #[test]
    fn mask_prompt_shorter_than_a_chunk() {
        // p = 4, kv = 6, 2 tokens: 2 padding rows all on, then causal over the last 2 columns.
        let m = mask_frame(4, 2, 6, 2, ON);
        assert_eq!(
            block0(&m, 4, 6, 2),
            vec![
                vec![1, 1, 1, 1, 1, 1],
                vec![1, 1, 1, 1, 1, 1],
                vec![0, 0, 0, 0, 1, 0],
                vec![0, 0, 0, 0, 1, 1]
            ]
        );
        // Every head block is block 0.
        for row in m.chunks(12) {
            assert_eq!(row[..6], row[6..]);
        }
    }

    #[test]
    fn mask_prompt_equal_to_a_chunk() {
        let m = mask_frame(4, 4, 6, 1, ON);
        assert_eq!(
            block0(&m, 4, 6, 1),
            vec![
                vec![0, 0, 1, 0, 0, 0],
                vec![0, 0, 1, 1, 0, 0],
                vec![0, 0, 1, 1, 1, 0],
                vec![0, 0, 1, 1, 1, 1]
            ]
        );
    }

    #[test]
    fn mask_second_chunk_sees_the_first() {
        // 6 tokens with p = 4: the remainder (2) went first; now 4 more, usage 6.
        let m = mask_frame(4, 6, 8, 1, ON);
        assert_eq!(
            block0(&m, 4, 8, 1),
            vec![
                vec![0, 0, 1, 1, 1, 0, 0, 0],
                vec![0, 0, 1, 1, 1, 1, 0, 0],
                vec![0, 0, 1, 1, 1, 1, 1, 0],
                vec![0, 0, 1, 1, 1, 1, 1, 1]
            ]
        );
    }

    #[test]
    fn mask_tbt_and_cache_full() {
        assert_eq!(block0(&mask_frame(1, 3, 6, 1, ON), 1, 6, 1), vec![vec![0, 0, 0, 1, 1, 1]]);
        // usage past kv: every column on, nothing padded.
        assert_eq!(block0(&mask_frame(1, 9, 6, 1, ON), 1, 6, 1), vec![vec![1, 1, 1, 1, 1, 1]]);
        assert_eq!(
            block0(&mask_frame(2, 9, 6, 1, ON), 2, 6, 1),
            vec![vec![1, 1, 1, 1, 1, 0], vec![1, 1, 1, 1, 1, 1]]
        );
    }

    #[test]
    fn windows_shift_and_frames_are_what_genai_sends() {
        // p = 3 rows of 2 features, theta of length 2, 2 heads / 1 kv head.
        let mut pp = PreProcess::new(3, 8, 2, 1, 2, vec![1.0, 0.5], ON);
        let row = |v: u16| vec![v, v + 100];
        let f = pp.prefill(&[row(1), row(2)]);
        assert_eq!(f.embeddings, vec![0, 0, 1, 101, 2, 102], "older rows are the (zeroed) window");
        assert_eq!(f.positions, vec![0, 0, 1]);
        let f = pp.prefill(&[row(3), row(4), row(5)]);
        assert_eq!(f.embeddings, vec![3, 103, 4, 104, 5, 105]);
        assert_eq!(f.positions, vec![2, 3, 4]);
        let f = pp.tbt(row(6));
        assert_eq!((f.embeddings.clone(), f.positions.clone(), f.rows), (vec![6, 106], vec![5], 1));
        // RoPE: per token [head][c], angle = theta[c] * pos in f32.
        assert_eq!(f.q_cos, vec![5f32.cos(), 2.5f32.cos(), 5f32.cos(), 2.5f32.cos()]);
        assert_eq!(f.k_sin, vec![5f32.sin(), 2.5f32.sin()]);
        assert_eq!(pp.usage, 6);
        pp.reset();
        assert_eq!((pp.usage, pp.counter), (0, 0));
    }

    #[test]
    fn chunks_are_remainder_first() {
        assert_eq!(crate::inputs::chunks(10, 4), vec![2, 4, 4]);
        assert_eq!(crate::inputs::chunks(8, 4), vec![4, 4]);
        assert_eq!(crate::inputs::chunks(3, 96), vec![3]);
    }
}
