import { useCallback, useEffect, useState } from "react";
import { api, type Schemas } from "../api/client";
import { Confirm } from "../components/Confirm";
import { Help } from "../components/Help";
import { Denied, errorText, Notice } from "../components/States";
import { localTime } from "../format";
import { Link } from "../router";
import { usePermission } from "../session";

type Page = Schemas["QueueJobPage"];
type Detail = Schemas["QueueJobDetail"];
type Action = "retry" | "cancel" | "delete";

const STATES = ["queued", "running", "finished", "failed", "cancelled"] as const;

const ACTION_TEXT: Record<Action, string> = {
  retry:
    "Retry: fire this job again for the same pool member, as a new run (its overlap lock is taken, the job's current retry budget applies). The old queue job is left as it is.",
  cancel:
    "Cancel: remove this waiting queue job. Its pool member's lock is released and the call history records the run as cancelled. It cannot be undone; run the job again instead.",
  delete:
    "Delete: forget this ended queue job in the engine (its row and log). The job's call history keeps its attempt. It cannot be undone.",
};

export function QueueInspector() {
  const denied = usePermission("jobs:write");
  const [queue, setQueue] = useState("");
  const [state, setState] = useState("");
  const [page, setPage] = useState<Page | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [detail, setDetail] = useState<Detail | null>(null);
  const [pending, setPending] = useState<Action | null>(null);
  const [message, setMessage] = useState<string | null>(null);

  const load = useCallback(async () => {
    try {
      setPage(await api("get", "/api/queue/jobs", { query: { queue, state } }));
      setError(null);
    } catch (failure) {
      setError(errorText(failure));
    }
  }, [queue, state]);

  useEffect(() => {
    if (!denied) void load();
  }, [load, denied]);

  async function open(id: number) {
    try {
      setDetail(
        await api("get", "/api/queue/jobs/{queue_job_id}", {
          params: { queue_job_id: String(id) },
        }),
      );
    } catch (failure) {
      setMessage(errorText(failure));
    }
  }

  async function act(action: Action, id: number) {
    const params = { queue_job_id: String(id) };
    try {
      if (action === "retry") {
        const made = await api("post", "/api/queue/jobs/{queue_job_id}/retry", { params });
        setMessage(`Queued as queue job ${made.queue_job_id}.`);
      } else if (action === "cancel") {
        await api("post", "/api/queue/jobs/{queue_job_id}/cancel", { params });
        setMessage(`Queue job ${id} cancelled.`);
      } else {
        await api("delete", "/api/queue/jobs/{queue_job_id}", { params });
        setMessage(`Queue job ${id} deleted.`);
      }
      setDetail(null);
      await load();
    } catch (failure) {
      setMessage(`Refused: ${errorText(failure)}`);
    }
  }

  if (denied) {
    return (
      <section>
        <h1>Queue</h1>
        <Denied reason={denied} />
      </section>
    );
  }
  return (
    <section className="queue-page" aria-label="Queue inspector">
      <div className="toolbar">
        <h1>Queue</h1>
        <Help topic="the queue inspector">
          Each queue job is one attempt waiting for, or having had, a worker. A failed call (HTTP
          500, a script&apos;s exit code) finishes its queue job normally: its outcome is the
          attempt column. Only users with jobs:write see this page; every action is audited.
        </Help>
      </div>
      <div className="filters">
        <label>
          Queue
          <select value={queue} onChange={(e) => setQueue(e.target.value)}>
            <option value="">all</option>
            {(page?.queues ?? []).map((q) => (
              <option key={q}>{q}</option>
            ))}
          </select>
        </label>
        <label>
          State
          <select value={state} onChange={(e) => setState(e.target.value)}>
            <option value="">all</option>
            {STATES.map((s) => (
              <option key={s}>{s}</option>
            ))}
          </select>
        </label>
        <button type="button" className="secondary" onClick={() => void load()}>
          Refresh
        </button>
      </div>
      {page && page.counts.length > 0 && (
        <ul className="queue-counts" aria-label="Queue job counts">
          {page.counts.map((c) => (
            <li key={`${c.queue}-${c.state}`}>
              {c.queue}, {c.state}: <strong>{c.count}</strong>
            </li>
          ))}
        </ul>
      )}
      {message && (
        <p className="notice" role="status">
          {message}
        </p>
      )}
      {error && <Notice kind="error" text={`The queue could not be read: ${error}`} />}
      {!error && !page && <Notice kind="loading" text="Loading the queue…" />}
      {page && page.queue_jobs.length === 0 && (
        <Notice kind="empty" text="No queue job matches these filters." />
      )}
      {page && page.queue_jobs.length > 0 && (
        <div className="table-scroll">
          <table aria-label="Queue jobs">
            <thead>
              <tr>
                <th scope="col">Id</th>
                <th scope="col">Queue</th>
                <th scope="col">State</th>
                <th scope="col">Job</th>
                <th scope="col">Attempt</th>
                <th scope="col">Updated</th>
                <th scope="col">
                  <span className="visually-hidden">Details</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {page.queue_jobs.map((q) => (
                <tr key={q.id}>
                  <td>{q.id}</td>
                  <td>{q.queue}</td>
                  <td className={`state-${q.state}`}>{q.state}</td>
                  <td>
                    {q.job_id ? (
                      <Link to={`/jobs/${q.job_id}`}>{q.job_name ?? q.job_id}</Link>
                    ) : (
                      "—"
                    )}
                  </td>
                  <td>
                    {q.attempt
                      ? `${q.attempt.state} (attempt ${q.attempt.attempt}, member ${q.attempt.pool_index})`
                      : "not started"}
                  </td>
                  <td>{localTime(q.updated_at)}</td>
                  <td>
                    <button
                      type="button"
                      className="link"
                      aria-label={`Details of queue job ${q.id}`}
                      onClick={() => void open(q.id)}
                    >
                      Details
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {detail && (
        <section className="queue-detail" aria-label={`Queue job ${detail.id}`}>
          <h2>Queue job {detail.id}</h2>
          <dl className="facts">
            <dt>State</dt>
            <dd>
              {detail.state} (engine: {detail.engine_status})
            </dd>
            <dt>Job</dt>
            <dd>{detail.job_name ?? "—"}</dd>
            <dt>Created</dt>
            <dd>{localTime(detail.created_at)}</dd>
            {detail.attempt && (
              <>
                <dt>Attempt</dt>
                <dd>
                  {detail.attempt.state}
                  {detail.attempt.error ? `: ${detail.attempt.error}` : ""}
                </dd>
              </>
            )}
          </dl>
          <h3>Payload</h3>
          {detail.payload ? (
            <pre className="mono" aria-label="Payload">
              {JSON.stringify(detail.payload, null, 2)}
            </pre>
          ) : (
            <p className="muted">
              No longer kept: the engine deletes a queue job&apos;s row once it ends.
            </p>
          )}
          <h3>Transitions</h3>
          <ol>
            {detail.transitions.map((t, i) => (
              <li key={i}>
                {localTime(t.at)}: {t.state}
                {t.error ? ` — ${t.error}` : ""}
              </li>
            ))}
          </ol>
          <div className="row actions">
            {(["retry", "cancel", "delete"] as const).map((action) => (
              <span key={action}>
                <button
                  type="button"
                  className={action === "retry" ? "" : "danger"}
                  onClick={() => setPending(action)}
                >
                  {action[0]?.toUpperCase() + action.slice(1)}
                </button>
                <Help topic={action}>{ACTION_TEXT[action]}</Help>
              </span>
            ))}
            <button type="button" className="secondary" onClick={() => setDetail(null)}>
              Close
            </button>
          </div>
        </section>
      )}
      {pending && detail && (
        <Confirm
          text={ACTION_TEXT[pending]}
          action={pending[0]?.toUpperCase() + pending.slice(1)}
          onCancel={() => setPending(null)}
          onConfirm={() => {
            const action = pending;
            setPending(null);
            void act(action, detail.id);
          }}
        />
      )}
    </section>
  );
}
