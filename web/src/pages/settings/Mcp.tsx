import { useState } from "react";
import { api, type Schemas } from "../../api/client";
import { Help } from "../../components/Help";
import { ListState, Outcome, ShownOnce, useAction, useLoad } from "../../components/Load";
import { RowButton, Table, usePendingConfirm } from "../../components/Table";
import { SectionHead } from "../../components/SectionHead";
import { Notice } from "../../components/States";
import { localTime } from "../../format";
import { allows, useSession } from "../../session";
import { mcpSnippets } from "./mcpSnippets";

type McpToken = Schemas["McpTokenView"];
const EXPIRIES = ["30d", "90d", "365d", "never"] as const;

export function McpSection() {
  const { me } = useSession();
  const canReadRoles = allows(me, "roles:read");
  const settings = useLoad(() => api("get", "/api/settings/mcp"));
  const tokens = useLoad(() => api("get", "/api/mcp-tokens"));
  const roles = useLoad(
    () => (canReadRoles ? api("get", "/api/roles") : Promise.resolve([])),
    [canReadRoles],
  );
  const { outcome, run } = useAction(tokens.reload);
  const [name, setName] = useState("");
  const [roleId, setRoleId] = useState("");
  const [expires, setExpires] = useState("90d");
  const [made, setMade] = useState<string | null>(null);
  const confirm = usePendingConfirm<McpToken>(
    (t) =>
      `Delete the MCP token ${t.name}: the agent using it is refused at its next request, and its hidden account goes (its audit entries stay). It cannot be undone.`,
    "Delete",
    (t) => {
      void run(
        () =>
          api("delete", "/api/mcp-tokens/{mcp_token_id}", {
            params: { mcp_token_id: t.id },
          }),
        `Deleted the MCP token ${t.name}.`,
      );
    },
  );
  const url = `${window.location.origin}/mcp`;
  const mcp = settings.data;

  return (
    <>
      <SectionHead title="MCP">
        The /mcp endpoint lets AI agents (Claude, Cursor, VS Code…) list and run jobs with an MCP
        token, each bound to a role. settings:mcp shows and changes this page. Turning it off
        refuses every agent at once; turning it on again restores them. Changes are audited.
      </SectionHead>
      <Outcome text={outcome} />
      {settings.error && (
        <Notice kind="error" text={`MCP settings could not be read: ${settings.error}`} />
      )}
      {mcp && (
        <div className="stack">
          <label className="choice">
            <input
              type="checkbox"
              checked={mcp.enabled}
              onChange={(e) =>
                void run(
                  () => api("put", "/api/settings/mcp", { body: { enabled: e.target.checked } }),
                  e.target.checked ? "MCP is on." : "MCP is off.",
                ).then(() => settings.reload())
              }
            />
            Serve /mcp to agents
          </label>
          {mcp.enabled && !mcp.live && (
            <p className="warning" role="alert">
              MCP is switched on, but the mcp service did not answer its health check at{" "}
              {localTime(mcp.checked_at)}: agents get no answer until it runs (start it, or set
              MCP_HEALTH_URL if it lives elsewhere).
            </p>
          )}
          {mcp.live && (
            <p className="muted">The mcp service answered at {localTime(mcp.checked_at)}.</p>
          )}
        </div>
      )}
      <form
        className="stack card-inline"
        aria-label="New MCP token"
        onSubmit={(e) => {
          e.preventDefault();
          void run(async () => {
            const created = await api("post", "/api/mcp-tokens", {
              body: {
                name,
                role_id: roleId,
                expires_in: expires as (typeof EXPIRIES)[number],
              },
            });
            setMade(created.token);
            setName("");
          }, `Created the MCP token ${name}.`);
        }}
      >
        <h2>New MCP token</h2>
        <label>
          Token name
          <input value={name} onChange={(e) => setName(e.target.value)} required />
        </label>
        {canReadRoles ? (
          <label>
            Role
            <select value={roleId} onChange={(e) => setRoleId(e.target.value)} required>
              <option value="">choose a role</option>
              {(roles.data ?? [])
                .filter((r) => r.system_key !== "super_admin")
                .map((r) => (
                  <option key={r.id} value={r.id}>
                    {r.name}
                  </option>
                ))}
            </select>
          </label>
        ) : (
          <Notice kind="empty" text="Choosing a token's role needs the roles:read permission." />
        )}
        <label>
          Expires after
          <select value={expires} onChange={(e) => setExpires(e.target.value)}>
            {EXPIRIES.map((x) => (
              <option key={x}>{x}</option>
            ))}
          </select>
        </label>
        <div className="row">
          <button type="submit" disabled={!canReadRoles}>
            Create MCP token
          </button>
          <Help topic="MCP tokens">
            The token acts with its role&apos;s permissions at each request, through a hidden
            account of its own whose changes are audited. It is shown once; delete it to cut the
            agent off (that cannot be undone).
          </Help>
        </div>
      </form>
      {made && (
        <section aria-label="Client set-up" className="stack">
          <ShownOnce label="New MCP token" value={made} onDone={() => setMade(null)} />
          {mcpSnippets(url, made).map((s) => (
            <div key={s.client} className="snippet">
              <h3>{s.client}</h3>
              <pre className="mono" aria-label={`${s.client} configuration`} tabIndex={0}>
                {s.text}
              </pre>
              <button
                type="button"
                className="small"
                onClick={() => void navigator.clipboard?.writeText(s.text)}
              >
                Copy {s.client.split(" (")[0]} snippet
              </button>
            </div>
          ))}
        </section>
      )}
      <h2>MCP tokens</h2>
      <ListState state={tokens} what="MCP tokens" empty="No MCP token yet.">
        {(list) => (
          <Table
            label="MCP tokens"
            headers={["Name", "Role", "Ends in", "Last used", "Expires", { hidden: "Delete" }]}
          >
            {list.map((t) => (
              <tr key={t.id}>
                <td>{t.name}</td>
                <td>{t.role_name}</td>
                <td className="mono">…{t.token_hint}</td>
                <td>{localTime(t.last_used_at)}</td>
                <td>{t.expires_at ? localTime(t.expires_at) : "never"}</td>
                <td>
                  <RowButton
                    label="Delete"
                    name={`Delete MCP token ${t.name}`}
                    kind="danger"
                    onClick={() => confirm.ask(t)}
                  />
                </td>
              </tr>
            ))}
          </Table>
        )}
      </ListState>
      {confirm.dialog}
    </>
  );
}
