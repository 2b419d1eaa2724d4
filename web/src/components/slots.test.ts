import { describe, expect, it } from "vitest";
import { bySlot, megabytes, slotIndex } from "./slots";

const geometry = {
  window_start: "2026-12-01T10:00:00Z",
  bucket_width_seconds: 600,
  slot_count: 6,
};

describe("slots", () => {
  it("places a bucket by the API's geometry, not the browser's clock", () => {
    expect(slotIndex(geometry, "2026-12-01T10:00:00Z")).toBe(0);
    expect(slotIndex(geometry, "2026-12-01T10:25:00Z")).toBe(2);
    expect(slotIndex(geometry, "2026-12-01T10:59:59Z")).toBe(5);
    expect(slotIndex(geometry, "2026-12-01T11:00:00Z")).toBeNull();
    expect(slotIndex(geometry, "2026-12-01T09:59:00Z")).toBeNull();
  });

  it("leaves a slot without data empty rather than zero", () => {
    const values = bySlot(
      geometry,
      [
        { bucket_start: "2026-12-01T10:10:00Z", n: 4 },
        { bucket_start: "2026-12-01T10:40:00Z", n: 0 },
      ],
      (b) => b.n,
    );
    expect(values).toEqual([null, 4, null, null, 0, null]);
  });

  it("counts memory in MB of 2^20 bytes", () => {
    expect(megabytes(512 * 2 ** 20)).toBe(512);
    expect(megabytes(1.25 * 2 ** 20)).toBe(1.3);
  });
});
