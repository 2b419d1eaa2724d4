/** The client configurations docs/mcp.md describes, filled in with this server's URL. */
export function mcpSnippets(url: string, token: string): { client: string; text: string }[] {
  const bearer = `Bearer ${token}`;
  const json = (value: unknown) => JSON.stringify(value, null, 2);
  return [
    {
      client: "Claude Code",
      text: `claude mcp add --transport http zilean ${url} \\\n  --header "Authorization: ${bearer}"`,
    },
    {
      client: "Cursor (~/.cursor/mcp.json)",
      text: json({ mcpServers: { zilean: { url, headers: { Authorization: bearer } } } }),
    },
    {
      client: "VS Code (.vscode/mcp.json)",
      text: json({
        servers: { zilean: { type: "http", url, headers: { Authorization: bearer } } },
      }),
    },
    {
      client: "Claude Desktop (claude_desktop_config.json)",
      text: json({
        mcpServers: {
          zilean: {
            command: "npx",
            args: ["-y", "mcp-remote", url, "--header", "Authorization:${ZILEAN_AUTH}"],
            env: { ZILEAN_AUTH: bearer },
          },
        },
      }),
    },
  ];
}
