import { useState } from "react";
import { api, type Schemas } from "../../api/client";
import { ListState, Outcome, ShownOnce, useAction, useLoad } from "../../components/Load";
import { RowButton, Table, usePendingConfirm } from "../../components/Table";
import { SectionHead } from "../../components/SectionHead";
import { Notice } from "../../components/States";
import { localTime } from "../../format";
import { allows, useSession } from "../../session";

type Token = Schemas["TokenView"];
const EXPIRIES = ["30d", "90d", "365d", "never"] as const;

export function TokensSection() {
  const { me } = useSession();
  const everyoneAllowed = allows(me, "users:write");
  const canReadRoles = allows(me, "roles:read");
  const [everyone, setEveryone] = useState(false);
  const tokens = useLoad(
    () => api("get", "/api/tokens", { query: { all: everyone ? "true" : undefined } }),
    [everyone],
  );
  const roles = useLoad(
    () => (canReadRoles ? api("get", "/api/roles") : Promise.resolve([])),
    [canReadRoles],
  );
  const { outcome, run } = useAction(tokens.reload);
  const [name, setName] = useState("");
  const [roleId, setRoleId] = useState("");
  const [expires, setExpires] = useState<string>("90d");
  const [secret, setSecret] = useState<string | null>(null);
  const confirm = usePendingConfirm<Token>(
    (t) =>
      `Revoke the token ${t.name}: every request with it is refused from now on. It cannot be undone; create a new token instead.`,
    "Revoke",
    (t) => {
      void run(
        () => api("delete", "/api/tokens/{token_id}", { params: { token_id: t.id } }),
        `Revoked the token ${t.name}.`,
      );
    },
  );

  return (
    <>
      <SectionHead title="API tokens">
        A token (zat_…) lets a script call the API as you, limited to one role and never beyond your
        own permissions. Everyone manages their own; users:write also sees and revokes
        everyone&apos;s. The secret is shown once; revoking is immediate and cannot be undone.
      </SectionHead>
      <Outcome text={outcome} />
      {secret && <ShownOnce label="New API token" value={secret} onDone={() => setSecret(null)} />}
      <form
        className="stack card-inline"
        aria-label="New API token"
        onSubmit={(e) => {
          e.preventDefault();
          void run(async () => {
            const made = await api("post", "/api/tokens", {
              body: { name, role_id: roleId, expires_in: expires },
            });
            setSecret(made.secret);
            setName("");
          }, `Created the token ${name}.`);
        }}
      >
        <h2>New token</h2>
        <label>
          Token name
          <input value={name} onChange={(e) => setName(e.target.value)} required />
        </label>
        {canReadRoles ? (
          <label>
            Role
            <select value={roleId} onChange={(e) => setRoleId(e.target.value)} required>
              <option value="">choose a role</option>
              {(roles.data ?? []).map((r) => (
                <option key={r.id} value={r.id}>
                  {r.name}
                </option>
              ))}
            </select>
          </label>
        ) : (
          <Notice
            kind="empty"
            text="Choosing a token's role needs the roles:read permission; ask an administrator."
          />
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
            Create token
          </button>
        </div>
      </form>
      {everyoneAllowed && (
        <label className="choice">
          <input
            type="checkbox"
            checked={everyone}
            onChange={(e) => setEveryone(e.target.checked)}
          />
          Show everyone&apos;s tokens
        </label>
      )}
      <ListState state={tokens} what="Tokens" empty="No API token yet.">
        {(list) => (
          <Table
            label="API tokens"
            headers={[
              "Name",
              "Owner",
              "Role",
              "Ends in",
              "Last used",
              "Expires",
              { hidden: "Revoke" },
            ]}
          >
            {list.map((t) => (
              <tr key={t.id}>
                <td>{t.name}</td>
                <td>{t.user_email}</td>
                <td>{t.role_name}</td>
                <td className="mono">…{t.token_hint}</td>
                <td>{localTime(t.last_used_at)}</td>
                <td>
                  {t.revoked_at
                    ? `revoked ${localTime(t.revoked_at)}`
                    : t.expires_at
                      ? localTime(t.expires_at)
                      : "never"}
                </td>
                <td>
                  {!t.revoked_at && (
                    <RowButton
                      label="Revoke"
                      name={`Revoke token ${t.name}`}
                      kind="danger"
                      onClick={() => confirm.ask(t)}
                    />
                  )}
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
