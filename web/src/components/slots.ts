/** A series' geometry as the API states it: slots are placed by it, gaps stay gaps. */
export interface Geometry {
  window_start: string;
  bucket_width_seconds: number;
  slot_count: number;
}

/** Which display slot a bucket starting at `start` falls in, or null outside the window. */
export function slotIndex(geometry: Geometry, start: string): number | null {
  const offset = (Date.parse(start) - Date.parse(geometry.window_start)) / 1000;
  const index = Math.floor(offset / geometry.bucket_width_seconds);
  return index >= 0 && index < geometry.slot_count ? index : null;
}

/** One value per slot (null where the API returned nothing), from buckets with a start. */
export function bySlot<T extends { bucket_start: string }>(
  geometry: Geometry,
  buckets: T[],
  value: (bucket: T) => number,
): (number | null)[] {
  const slots: (number | null)[] = new Array<number | null>(geometry.slot_count).fill(null);
  for (const bucket of buckets) {
    const index = slotIndex(geometry, bucket.bucket_start);
    if (index !== null) slots[index] = value(bucket);
  }
  return slots;
}

/** A byte count in MB (2^20 bytes), as the memory alarms count it. */
export function megabytes(bytes: number): number {
  return Math.round((bytes / 2 ** 20) * 10) / 10;
}
