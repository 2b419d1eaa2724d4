import { describe, expect, it } from "vitest";
import { changedFields } from "./auditDiff";

describe("changedFields", () => {
  it("lists only the fields whose values differ", () => {
    const before = { id: "r1", name: "Runners", permissions: ["jobs:read", "jobs:write"] };
    const after = { id: "r1", name: "Runners", permissions: ["jobs:read"] };
    expect(changedFields(before, after)).toEqual([
      { field: "permissions", before: '["jobs:read","jobs:write"]', after: '["jobs:read"]' },
    ]);
  });

  it("shows a creation's and a deletion's fields against a dash", () => {
    expect(changedFields(null, { name: "x" })).toEqual([
      { field: "name", before: "—", after: "x" },
    ]);
    expect(changedFields({ name: "x" }, null)).toEqual([
      { field: "name", before: "x", after: "—" },
    ]);
  });

  it("keeps a masked secret as the API masked it", () => {
    expect(changedFields({ password: "***" }, { password: "***", host: "a" })).toEqual([
      { field: "host", before: "—", after: "a" },
    ]);
  });
});
