// The register side of a vector global access (load_store_ops.py): `tt_unpack(thread T* regs, A v)` writes
// the W elements a vector access of MSL type A moved to consecutive registers, `tt_packW(thread const T*
// regs)` reads them into one such value. A is `T<W>` (the `_vector` forms) or, for 8 and 16-bit elements
// moved up to 16 bytes at once, 32-bit words (`uint4` for 8 halves), each word holding PER elements as a
// PART (`T2`/`T4`) (the `_words` forms). One overload is emitted per (T, A) and (T, W) a kernel uses.
// Parameters: $T element type, $A access type, $W elements, $PER elements per word, $PART the word's vector
// type, $WORDS words (W / PER).

// @helper tt_unpack_vector
// @params T A W
static inline void tt_unpack(thread $T* regs, $A v) { for (int j = 0; j < $W; ++j) regs[j] = v[j]; }

// @helper tt_pack_vector
// @params T A W
static inline $A tt_pack$W(thread const $T* regs) { $A v; for (int j = 0; j < $W; ++j) v[j] = regs[j]; return v; }

// @helper tt_unpack_words
// @params T A W PER PART
static inline void tt_unpack(thread $T* regs, $A v) { for (int j = 0; j < $W; ++j) regs[j] = as_type<$PART>(v[j / $PER])[j % $PER]; }

// @helper tt_pack_words
// @params T A W PER PART WORDS
static inline $A tt_pack$W(thread const $T* regs) { $A v; for (int w = 0; w < $WORDS; ++w) { $PART p; for (int j = 0; j < $PER; ++j) p[j] = regs[$PER * w + j]; v[w] = as_type<uint>(p); } return v; }
