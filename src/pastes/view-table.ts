/**
 * Counts per paste id, held outside the JavaScript heap, for ViewCounter.
 *
 * Why not a Map: counts live for up to a second before they are written, and with tens of
 * thousands of pastes read a second a Map's entries and id strings outlived two young-generation
 * collections, so V8 promoted them: 2.7 MB a second into old space (`--trace-gc-nvp`, /raw over
 * 100,000 pastes; with view counting off, nothing). Old space then grew by that much between full
 * collections, up to four times what is live, and peak RSS with it (185–199 MB in `npm run bench`).
 * Here an id is copied as bytes into an arena, the slots are typed arrays, and a table is cleared
 * and used again: counting a view allocates nothing on the heap.
 *
 * Open addressing with linear probing over a power-of-two number of slots, at most half full
 * (the table doubles before that). A slot holds the id's hash (0: empty), where its UTF-8 bytes
 * are in the arena, its count, and the created_at of the paste it counts (the newest, should the
 * id's paste be deleted and made again while its views wait). Entries are never removed one by
 * one (forget() sets a count to 0): the table is cleared as a whole once its counts are written.
 * Ids are well-formed strings (D9 ids are ASCII); one with a lone surrogate would not find its
 * own entry again.
 */
import { randomInt } from 'node:crypto';

export class ViewTable {
  private mask!: number;
  private hashes!: Int32Array;
  private offsets!: Uint32Array;
  private lengths!: Uint16Array;
  private counts!: Float64Array;
  private createdAts!: Float64Array;
  /** Occupied slots in the order they were filled (for clearing and listing without a scan). */
  private filled!: Int32Array;
  private arena: Buffer;
  private arenaUsed = 0;
  private sortKeys!: Float64Array;
  size = 0;

  constructor(slots = MIN_SLOTS) {
    const capacity = 2 ** Math.ceil(Math.log2(Math.max(16, slots)));
    this.allocate(capacity);
    this.arena = Buffer.allocUnsafe(capacity * 8);
  }

  /**
   * Adds `n` views to `id`, of the paste made at `createdAt`; returns its count now. A slot
   * counts one paste at a time: ids are unique, so a paste made later under the id means the
   * earlier one is gone. Its first views start the slot afresh (the gone paste's are not added
   * to them), and views of an earlier paste counted late are dropped (0 returned).
   */
  add(id: string, n: number, createdAt: number): number {
    const hash = hashOf(id);
    let slot = this.find(id, hash);
    if (slot < 0) {
      if (this.size + 1 > (this.mask + 1) / 2) this.grow();
      slot = this.insert(id, hash);
      this.createdAts[slot] = createdAt;
    } else if (createdAt !== this.createdAts[slot]) {
      if (createdAt < (this.createdAts[slot] as number)) return 0;
      this.createdAts[slot] = createdAt;
      this.counts[slot] = 0;
    }
    const count = (this.counts[slot] as number) + n;
    this.counts[slot] = count;
    return count;
  }

  /**
   * The count of `id` (0 when it has none); with `createdAt`, only when it counts the paste made
   * then (a deleted paste's views are not shown on one made again under its id).
   */
  get(id: string, createdAt?: number): number {
    if (this.size === 0) return 0;
    const slot = this.find(id, hashOf(id));
    if (slot < 0 || (createdAt !== undefined && this.createdAts[slot] !== createdAt)) return 0;
    return this.counts[slot] as number;
  }

  /**
   * The occupied slots ordered by the bytes of their ids, which is SQLite's order for text keys
   * (and the same order on every instance). Valid until the table changes.
   */
  sortedSlots(): Int32Array {
    const n = this.size;
    const keys = this.sortKeys.subarray(0, n);
    // Sorted by number, natively: the first three bytes of the id above the slot number.
    for (let i = 0; i < n; i++) {
      const slot = this.filled[i] as number;
      keys[i] = this.prefixOf(slot) * SLOT_SPAN + slot;
    }
    keys.sort();
    const slots = new Int32Array(n);
    for (let i = 0; i < n; i++) slots[i] = (keys[i] as number) % SLOT_SPAN;
    // Ids that share their first three bytes are next to each other: order them by all their bytes.
    let start = 0;
    for (let i = 1; i <= n; i++) {
      if (i === n || Math.floor((keys[i] as number) / SLOT_SPAN) !== Math.floor((keys[start] as number) / SLOT_SPAN)) {
        if (i - start > 1) this.sortRun(slots, start, i);
        start = i;
      }
    }
    return slots;
  }

  /**
   * Sets the count of `id` to 0 (the slot stays until the table is cleared), when it counts the
   * paste made at `createdAt`: not when a paste made since under the id has counted views here.
   */
  forget(id: string, createdAt: number): void {
    if (this.size === 0) return;
    const slot = this.find(id, hashOf(id));
    if (slot >= 0 && this.createdAts[slot] === createdAt) this.counts[slot] = 0;
  }

  /** The ids with views held (a forgotten id holds none), and those views in all. */
  held(): { ids: number; views: number } {
    let ids = 0;
    let views = 0;
    for (let i = 0; i < this.size; i++) {
      const n = this.counts[this.filled[i] as number] as number;
      if (n > 0) {
        ids++;
        views += n;
      }
    }
    return { ids, views };
  }

  idAt(slot: number): string {
    const offset = this.offsets[slot] as number;
    return this.arena.toString('utf8', offset, offset + (this.lengths[slot] as number));
  }

  countAt(slot: number): number {
    return this.counts[slot] as number;
  }

  /** The created_at of the paste whose views a slot counts. */
  createdAtOf(slot: number): number {
    return this.createdAts[slot] as number;
  }

  setCount(slot: number, n: number): void {
    this.counts[slot] = n;
  }

  /**
   * Empties the table, keeping its size for the next second unless it held under an eighth of
   * its slots (then half the slots: a burst of ids does not hold its memory for good).
   */
  clear(): void {
    const capacity = this.mask + 1;
    if (capacity > MIN_SLOTS && this.size * 8 < capacity) {
      this.allocate(capacity / 2);
      if (this.arena.length > capacity * 4) this.arena = Buffer.allocUnsafe(capacity * 4);
    } else {
      for (let i = 0; i < this.size; i++) this.hashes[this.filled[i] as number] = 0;
    }
    this.size = 0;
    this.arenaUsed = 0;
  }

  private find(id: string, hash: number): number {
    let slot = hash & this.mask;
    for (;;) {
      const h = this.hashes[slot];
      if (h === 0) return -1;
      if (h === hash && this.holds(slot, id)) return slot;
      slot = (slot + 1) & this.mask;
    }
  }

  private holds(slot: number, id: string): boolean {
    const length = this.lengths[slot] as number;
    const offset = this.offsets[slot] as number;
    if (length === id.length) {
      const arena = this.arena;
      let ascii = true;
      for (let i = 0; i < length; i++) {
        const c = id.charCodeAt(i);
        if (c > 0x7f) {
          ascii = false;
          break;
        }
        if (arena[offset + i] !== c) return false;
      }
      if (ascii) return true;
    }
    // An id with other than ASCII: compare its UTF-8 bytes (D9 ids are ASCII; this is the rare path).
    return Buffer.byteLength(id) === length && this.arena.toString('utf8', offset, offset + length) === id;
  }

  private insert(id: string, hash: number): number {
    const bytes = Buffer.byteLength(id);
    if (bytes > 0xffff) throw new RangeError('paste id too long to count');
    while (this.arenaUsed + bytes > this.arena.length) {
      const larger = Buffer.allocUnsafe(this.arena.length * 2);
      this.arena.copy(larger, 0, 0, this.arenaUsed);
      this.arena = larger;
    }
    const offset = this.arenaUsed;
    if (bytes === id.length) {
      for (let i = 0; i < bytes; i++) this.arena[offset + i] = id.charCodeAt(i);
    } else {
      this.arena.write(id, offset, 'utf8');
    }
    this.arenaUsed += bytes;
    let slot = hash & this.mask;
    while (this.hashes[slot] !== 0) slot = (slot + 1) & this.mask;
    this.hashes[slot] = hash;
    this.offsets[slot] = offset;
    this.lengths[slot] = bytes;
    this.counts[slot] = 0;
    this.filled[this.size++] = slot;
    return slot;
  }

  /** Twice the slots, the entries placed again (their bytes stay where they are in the arena). */
  private grow(): void {
    const old = {
      hashes: this.hashes,
      offsets: this.offsets,
      lengths: this.lengths,
      counts: this.counts,
      createdAts: this.createdAts,
    };
    const oldFilled = this.filled;
    const size = this.size;
    this.allocate((this.mask + 1) * 2);
    for (let i = 0; i < size; i++) {
      const from = oldFilled[i] as number;
      let slot = (old.hashes[from] as number) & this.mask;
      while (this.hashes[slot] !== 0) slot = (slot + 1) & this.mask;
      this.hashes[slot] = old.hashes[from] as number;
      this.offsets[slot] = old.offsets[from] as number;
      this.lengths[slot] = old.lengths[from] as number;
      this.counts[slot] = old.counts[from] as number;
      this.createdAts[slot] = old.createdAts[from] as number;
      this.filled[i] = slot;
    }
  }

  /** Empty slot arrays for `capacity` slots (at most half of them filled). */
  private allocate(capacity: number): void {
    this.mask = capacity - 1;
    this.hashes = new Int32Array(capacity);
    this.offsets = new Uint32Array(capacity);
    this.lengths = new Uint16Array(capacity);
    this.counts = new Float64Array(capacity);
    this.createdAts = new Float64Array(capacity);
    this.filled = new Int32Array(capacity / 2);
    this.sortKeys = new Float64Array(capacity / 2);
  }

  /** The first three bytes of a slot's id as a number (missing bytes count as 0). */
  private prefixOf(slot: number): number {
    const offset = this.offsets[slot] as number;
    const length = this.lengths[slot] as number;
    let prefix = 0;
    for (let i = 0; i < 3; i++) prefix = prefix * 256 + (i < length ? (this.arena[offset + i] as number) : 0);
    return prefix;
  }

  private compareIds(a: number, b: number): number {
    const arena = this.arena;
    const oa = this.offsets[a] as number;
    const ob = this.offsets[b] as number;
    const la = this.lengths[a] as number;
    const lb = this.lengths[b] as number;
    const n = la < lb ? la : lb;
    for (let i = 0; i < n; i++) {
      const d = (arena[oa + i] as number) - (arena[ob + i] as number);
      if (d !== 0) return d;
    }
    return la - lb;
  }

  /**
   * Sorts slots[start, end) by id bytes: by insertion when the run is short (random ids share
   * three bytes with a few others at most), else with a comparison sort (slugs chosen by users
   * can share a prefix by the thousand: insertion would take seconds).
   */
  private sortRun(slots: Int32Array, start: number, end: number): void {
    if (end - start > 16) {
      const run = Array.from(slots.subarray(start, end)).sort((a, b) => this.compareIds(a, b));
      slots.set(run, start);
      return;
    }
    for (let i = start + 1; i < end; i++) {
      const slot = slots[i] as number;
      let j = i - 1;
      while (j >= start && this.compareIds(slots[j] as number, slot) > 0) {
        slots[j + 1] = slots[j] as number;
        j--;
      }
      slots[j + 1] = slot;
    }
  }
}

/** The size a table starts at and does not shrink below. */
const MIN_SLOTS = 1 << 12;

/** Slot numbers sit below the id prefix in a sort key: 2^29 slots, 2^24 prefixes, within 2^53. */
const SLOT_SPAN = 2 ** 29;

/** A seed of this process's own, so that no one can choose ids that all land on the same slots. */
const SEED = randomInt(2 ** 31);

/** FNV-1a over the UTF-16 code units, from a seeded start, as an int32 that is never 0 (empty). */
function hashOf(id: string): number {
  let h = 0x811c9dc5 ^ SEED;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193);
  h ^= h >>> 16;
  return h | 0 || 1;
}
