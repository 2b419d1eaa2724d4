import { useState } from "react";
import { api, type Schemas } from "../../api/client";
import { useLoad } from "../../components/Load";
import { Table } from "../../components/Table";
import { SectionHead } from "../../components/SectionHead";
import { Notice } from "../../components/States";
import { localTime } from "../../format";
import { changedFields } from "./auditDiff";
import { allows, useSession } from "../../session";

type Entry = Schemas["AuditEntry"];
interface Filters {
  actor_user_id: string;
  action: string;
  resource_type: string;
  since: string;
  until: string;
}
const NONE: Filters = { actor_user_id: "", action: "", resource_type: "", since: "", until: "" };

/** A datetime-local value as an ISO instant in the browser's zone, or undefined when blank. */
function instant(local: string): string | undefined {
  return local ? new Date(local).toISOString() : undefined;
}

function Change(props: { entry: Entry }) {
  const { before, after } = props.entry;
  if (!before && !after) return <span className="muted">no snapshot</span>;
  const fields = changedFields(before, after);
  return (
    <details>
      <summary>
        {fields.length} field{fields.length === 1 ? "" : "s"} changed
      </summary>
      <table className="counts" aria-label={`Change ${props.entry.id}`}>
        <thead>
          <tr>
            <th scope="col">Field</th>
            <th scope="col">Before</th>
            <th scope="col">After</th>
          </tr>
        </thead>
        <tbody>
          {fields.map((f) => (
            <tr key={f.field}>
              <th scope="row">{f.field}</th>
              <td className="mono">{f.before}</td>
              <td className="mono">{f.after}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </details>
  );
}

export function AuditSection() {
  const { me } = useSession();
  const canListUsers = allows(me, "users:read");
  const users = useLoad(
    () => (canListUsers ? api("get", "/api/users") : Promise.resolve([])),
    [canListUsers],
  );
  const [draft, setDraft] = useState<Filters>(NONE);
  const [filters, setFilters] = useState<Filters>(NONE);
  // Cursors of the pages before this one, so Newer can go back.
  const [cursors, setCursors] = useState<string[]>([]);
  const cursor = cursors[cursors.length - 1];
  const page = useLoad(
    () =>
      api("get", "/api/audit-log", {
        query: {
          actor_user_id: filters.actor_user_id || undefined,
          action: filters.action || undefined,
          resource_type: filters.resource_type || undefined,
          since: instant(filters.since),
          until: instant(filters.until),
          cursor,
        },
      }),
    [filters, cursor],
  );
  const field = (key: keyof Filters) => ({
    value: draft[key],
    onChange: (e: React.ChangeEvent<HTMLInputElement | HTMLSelectElement>) =>
      setDraft({ ...draft, [key]: e.target.value }),
  });

  return (
    <>
      <SectionHead title="Audit log">
        Every change made through the UI, the API or MCP: who, when, from where, and the record
        before and after, with secrets masked. audit:read shows it. Entries cannot be edited; they
        are deleted only by the audit retention setting.
      </SectionHead>
      <form
        className="filters"
        aria-label="Audit filters"
        onSubmit={(e) => {
          e.preventDefault();
          setCursors([]);
          setFilters(draft);
        }}
      >
        {canListUsers ? (
          <label>
            User
            <select {...field("actor_user_id")}>
              <option value="">anyone</option>
              {(users.data ?? []).map((u) => (
                <option key={u.id} value={u.id}>
                  {u.email}
                </option>
              ))}
            </select>
          </label>
        ) : (
          <label>
            User id
            <input {...field("actor_user_id")} />
          </label>
        )}
        <label>
          Action
          <input {...field("action")} placeholder="e.g. job.update" />
        </label>
        <label>
          Resource type
          <input {...field("resource_type")} placeholder="e.g. job" />
        </label>
        <label>
          From
          <input type="datetime-local" {...field("since")} />
        </label>
        <label>
          To
          <input type="datetime-local" {...field("until")} />
        </label>
        <button type="submit">Apply filters</button>
        <button
          type="button"
          className="secondary"
          onClick={() => {
            setDraft(NONE);
            setCursors([]);
            setFilters(NONE);
          }}
        >
          Clear
        </button>
      </form>
      {page.error && (
        <Notice kind="error" text={`The audit log could not be read: ${page.error}`} />
      )}
      {!page.error && !page.data && <Notice kind="loading" text="Loading the audit log…" />}
      {page.data && page.data.entries.length === 0 && (
        <Notice kind="empty" text="No audit entry matches these filters." />
      )}
      {page.data && page.data.entries.length > 0 && (
        <Table
          label="Audit entries"
          headers={["When", "Who", "Action", "Resource", "From", "Change"]}
        >
          {page.data.entries.map((e) => (
            <tr key={e.id}>
              <td>{localTime(e.occurred_at)}</td>
              <td>{e.actor_email ?? e.actor_user_id ?? "system"}</td>
              <td className="mono">{e.action}</td>
              <td>
                {e.resource_type}
                {e.resource_id ? <span className="muted"> {e.resource_id}</span> : null}
              </td>
              <td>{e.ip ?? "—"}</td>
              <td>
                <Change entry={e} />
              </td>
            </tr>
          ))}
        </Table>
      )}
      <div className="row">
        <button
          type="button"
          className="secondary"
          disabled={cursors.length === 0}
          onClick={() => setCursors(cursors.slice(0, -1))}
        >
          Newer
        </button>
        <button
          type="button"
          className="secondary"
          disabled={!page.data?.next_cursor}
          onClick={() => page.data?.next_cursor && setCursors([...cursors, page.data.next_cursor])}
        >
          Older
        </button>
      </div>
    </>
  );
}
