import { describe, expect, it } from "vitest";
import { mcpSnippets } from "./mcpSnippets";

describe("mcpSnippets", () => {
  const snippets = mcpSnippets("https://z.example/mcp", "zmcp_abc");

  it("fills every client's configuration with the URL and the bearer token", () => {
    expect(snippets.map((s) => s.client.split(" (")[0])).toEqual([
      "Claude Code",
      "Cursor",
      "VS Code",
      "Claude Desktop",
    ]);
    for (const s of snippets) {
      expect(s.text).toContain("https://z.example/mcp");
      expect(s.text).toContain("Bearer zmcp_abc");
    }
  });

  it("passes Claude Desktop's header through env, not split arguments", () => {
    const desktop = JSON.parse(snippets[3]?.text ?? "{}");
    expect(desktop.mcpServers.zilean.args).toContain("Authorization:${ZILEAN_AUTH}");
    expect(desktop.mcpServers.zilean.env.ZILEAN_AUTH).toBe("Bearer zmcp_abc");
  });

  it("gives VS Code the http type it needs", () => {
    expect(JSON.parse(snippets[2]?.text ?? "{}").servers.zilean.type).toBe("http");
  });
});
