import { useCallback, useEffect, useState } from "react";
import { api, ApiError, type CallEntry, type Job, type Schemas } from "../api/client";
import { Confirm } from "../components/Confirm";
import { Denied, errorText, Notice } from "../components/States";
import { localTime, zoneTime } from "../format";
import { Link, navigate } from "../router";
import { usePermission } from "../session";
import { groupRuns, runState } from "./runs";
import { JobAlarms } from "./JobAlarms";
import { state } from "./JobsList";

const CALLS_POLL_MS = 3_000;
const WINDOWS: Record<string, { since: string; buckets: number }> = {
  "1 hour": { since: "1h", buckets: 60 },
  "24 hours": { since: "24h", buckets: 48 },
  "7 days": { since: "168h", buckets: 56 },
};

function outcome(call: CallEntry): string {
  const last = call.last_call;
  if (!last) return "—";
  if ("status_code" in last && last.status_code !== null) return `HTTP ${last.status_code}`;
  if ("exit_code" in last && last.exit_code !== null) return `exit ${last.exit_code}`;
  return last.error ?? "—";
}

function snippet(call: CallEntry): string {
  const last = call.last_call;
  if (!last) return "";
  if ("response_snippet" in last) return last.response_snippet ?? last.error ?? "";
  if ("stdout_snippet" in last)
    return [last.stdout_snippet, last.stderr_snippet].filter(Boolean).join("\n");
  return "";
}

type Bucket = Schemas["JobActivity"]["buckets"][number];

/** One series drawn behind another (total and failed calls, slowest and average latency),
 * each bar scaled to `most`. */
function PairedBars(props: {
  caption: string;
  label: string;
  buckets: Bucket[];
  most: number;
  back: (b: Bucket) => number;
  front: (b: Bucket) => number;
  classes: [string, string];
}) {
  const { buckets, most, back, front, classes } = props;
  const bar = (i: number, value: number, className: string) => (
    <rect
      x={i * 6}
      y={60 - (value / most) * 60}
      width={5}
      height={(value / most) * 60}
      className={className}
    />
  );
  return (
    <figure>
      <figcaption>{props.caption}</figcaption>
      <svg
        viewBox={`0 0 ${buckets.length * 6} 60`}
        role="img"
        aria-label={props.label}
        preserveAspectRatio="none"
      >
        {buckets.map((b, i) => (
          <g key={b.bucket_start}>
            {bar(i, back(b), classes[0])}
            {bar(i, front(b), classes[1])}
          </g>
        ))}
      </svg>
    </figure>
  );
}

function Chart(props: { activity: Schemas["JobActivity"] }) {
  const buckets = props.activity.buckets;
  const most = Math.max(1, ...buckets.map((b) => b.total));
  const slowest = Math.max(1, ...buckets.map((b) => b.duration_ms_max));
  return (
    <div className="charts">
      <PairedBars
        caption="Calls per bucket (red: failed)"
        label="Call volume"
        buckets={buckets}
        most={most}
        back={(b) => b.total}
        front={(b) => b.failed}
        classes={["bar-ok", "bar-failed"]}
      />
      <PairedBars
        caption={`Latency, average and slowest (longest ${slowest} ms)`}
        label="Call latency"
        buckets={buckets}
        most={slowest}
        back={(b) => b.duration_ms_max}
        front={(b) => b.duration_ms_avg}
        classes={["bar-max", "bar-avg"]}
      />
    </div>
  );
}

export function JobDetail(props: { jobId: string }) {
  const [job, setJob] = useState<Job | null>(null);
  const [calls, setCalls] = useState<CallEntry[] | null>(null);
  const [callsError, setCallsError] = useState<string | null>(null);
  const [activity, setActivity] = useState<Schemas["JobActivity"] | null>(null);
  const [activityError, setActivityError] = useState<string | null>(null);
  const [windowName, setWindowName] = useState("24 hours");
  const [error, setError] = useState<string | null>(null);
  const [message, setMessage] = useState<string | null>(null);
  const [confirmDelete, setConfirmDelete] = useState(false);
  const [confirmRotate, setConfirmRotate] = useState(false);
  const [webhookUrl, setWebhookUrl] = useState<string | null>(() => {
    const key = `webhook:${props.jobId}`;
    const url = sessionStorage.getItem(key);
    sessionStorage.removeItem(key);
    return url;
  });
  const writeDenied = usePermission("jobs:write");
  const params = { job_id: props.jobId };

  const loadJob = useCallback(async () => {
    try {
      setJob(await api("get", "/api/jobs/{job_id}", { params: { job_id: props.jobId } }));
    } catch (failure) {
      setError(errorText(failure));
    }
  }, [props.jobId]);

  useEffect(() => {
    void loadJob();
  }, [loadJob]);

  useEffect(() => {
    let stopped = false;
    const poll = async () => {
      try {
        const next = await api("get", "/api/jobs/{job_id}/calls", {
          params: { job_id: props.jobId },
          query: { limit: 100 },
        });
        if (!stopped) {
          setCalls(next);
          setCallsError(null);
        }
      } catch (failure) {
        if (!stopped) setCallsError(errorText(failure));
      }
    };
    void poll();
    const timer = window.setInterval(() => void poll(), CALLS_POLL_MS);
    return () => {
      stopped = true;
      window.clearInterval(timer);
    };
  }, [props.jobId]);

  useEffect(() => {
    const chosen = WINDOWS[windowName] ?? { since: "24h", buckets: 48 };
    api("get", "/api/jobs/{job_id}/activity", { params: { job_id: props.jobId }, query: chosen })
      .then((read) => {
        setActivity(read);
        setActivityError(null);
      })
      .catch((failure: unknown) => setActivityError(errorText(failure)));
  }, [props.jobId, windowName, calls?.length]);

  async function act(what: () => Promise<unknown>, done: string) {
    try {
      const said = await what();
      setMessage(typeof said === "string" ? said : done);
      await loadJob();
    } catch (failure) {
      setMessage(
        failure instanceof ApiError && failure.status === 409
          ? `Not run: ${failure.message}.`
          : errorText(failure),
      );
    }
  }

  if (error) return <Notice kind="error" text={`The job could not be loaded: ${error}`} />;
  if (!job) return <Notice kind="loading" text="Loading the job…" />;
  const runs = calls ? groupRuns(calls) : [];

  return (
    <div className="job-detail">
      <p>
        <Link to="/">← All jobs</Link>
      </p>
      <h1>{job.name}</h1>
      <dl className="facts">
        <dt>Group</dt>
        <dd>{job.group_name || "—"}</dd>
        <dt>Type</dt>
        <dd>{job.job_type}</dd>
        <dt>Schedule</dt>
        <dd>
          {job.schedule_type === "cron" || job.schedule_type === "rate"
            ? `${job.schedule_type} ${job.cron_expression}`
            : job.schedule_type}
        </dd>
        <dt>Next run</dt>
        <dd>
          <time title={zoneTime(job.next_run_at, job.timezone || "UTC")}>
            {localTime(job.next_run_at)}
          </time>
        </dd>
        <dt>State</dt>
        <dd>{state(job)}</dd>
        {job.job_type === "http" && (
          <>
            <dt>Request</dt>
            <dd className="mono">
              {job.http_method} {job.url}
            </dd>
          </>
        )}
        <dt>Lifetime</dt>
        <dd>
          {job.invocations_total} calls, {job.invocations_completed} succeeded,{" "}
          {job.invocations_failed} failed
        </dd>
      </dl>

      {job.schedule_type === "webhook" && (
        <section aria-label="Webhook" className="webhook">
          <h2>Webhook</h2>
          {webhookUrl ? (
            <>
              <p className="warning">Copy this URL now: its token is shown only this once.</p>
              <code className="mono">{webhookUrl}</code>
              <button type="button" onClick={() => void navigator.clipboard.writeText(webhookUrl)}>
                Copy
              </button>
            </>
          ) : (
            <p>
              Token ending {job.webhook_token_hint ?? "—"}, issued{" "}
              {localTime(job.webhook_token_rotated_at)}.
            </p>
          )}
          {!writeDenied && (
            <button type="button" className="secondary" onClick={() => setConfirmRotate(true)}>
              Rotate token
            </button>
          )}
        </section>
      )}

      <div className="row actions">
        {writeDenied ? (
          <Denied reason={writeDenied} />
        ) : (
          <>
            <button
              type="button"
              onClick={() =>
                void act(async () => {
                  const queued = await api("post", "/api/jobs/{job_id}/run", { params });
                  const busy = queued.busy_members.length
                    ? `; skipped busy pool members ${queued.busy_members.join(", ")}`
                    : "";
                  return `Queued ${queued.queued} attempt${queued.queued === 1 ? "" : "s"}${busy}.`;
                }, "Queued.")
              }
            >
              Run now
            </button>
            {job.enabled ? (
              <button
                type="button"
                className="secondary"
                onClick={() =>
                  void act(() => api("post", "/api/jobs/{job_id}/disable", { params }), "Disabled.")
                }
              >
                Disable
              </button>
            ) : (
              <button
                type="button"
                className="secondary"
                onClick={() =>
                  void act(() => api("post", "/api/jobs/{job_id}/enable", { params }), "Enabled.")
                }
              >
                Enable
              </button>
            )}
            <Link to={`/jobs/${job.id}/edit`} className="button secondary">
              Edit
            </Link>
            <Link to={`/jobs/new?from=${job.id}`} className="button secondary">
              Duplicate
            </Link>
            <button type="button" className="danger" onClick={() => setConfirmDelete(true)}>
              Delete
            </button>
          </>
        )}
      </div>
      {message && (
        <p className="notice" role="status">
          {message}
        </p>
      )}

      <section aria-label="Activity">
        <div className="row">
          <h2>Activity</h2>
          <label>
            Window
            <select value={windowName} onChange={(e) => setWindowName(e.target.value)}>
              {Object.keys(WINDOWS).map((w) => (
                <option key={w}>{w}</option>
              ))}
            </select>
          </label>
        </div>
        {activityError ? (
          <Notice kind="error" text={`Activity could not be read: ${activityError}`} />
        ) : activity ? (
          <Chart activity={activity} />
        ) : (
          <Notice kind="loading" text="Loading activity…" />
        )}
        <JobAlarms jobId={props.jobId} />
      </section>

      <section aria-label="Calls">
        <h2>Calls</h2>
        {callsError && (
          <Notice kind="error" text={`The calls could not be loaded: ${callsError}`} />
        )}
        {!calls && !callsError && <Notice kind="loading" text="Loading calls…" />}
        {calls && runs.length === 0 && (
          <Notice kind="empty" text="No calls yet. Run it now, or wait for its schedule." />
        )}
        <ol className="runs">
          {runs.map((run) => (
            <li
              key={run.key}
              className={`run run-${runState(run)}`}
              aria-label={`Run with ${run.attempts.length} attempts, ${runState(run)}`}
            >
              <div className="run-head">
                <strong>{runState(run)}</strong> · started{" "}
                {localTime(run.attempts[0]?.attempted_at)} · pool {run.pool_index} ·{" "}
                {run.attempts.length} attempt{run.attempts.length === 1 ? "" : "s"}
              </div>
              <table className="attempts">
                <thead>
                  <tr>
                    <th scope="col">Iteration</th>
                    <th scope="col">Attempt</th>
                    <th scope="col">State</th>
                    <th scope="col">At</th>
                    <th scope="col">Took</th>
                    <th scope="col">Result</th>
                    <th scope="col">Output</th>
                  </tr>
                </thead>
                <tbody>
                  {run.attempts.map((call) => (
                    <tr
                      key={`${call.job_id}-${call.attempt}-${call.loop_iteration}-${call.attempted_at}`}
                    >
                      <td>{call.loop_iteration}</td>
                      <td>
                        {call.attempt} of {call.max_attempts}
                      </td>
                      <td>{call.state}</td>
                      <td>{localTime(call.attempted_at)}</td>
                      <td>{call.duration_ms === null ? "—" : `${call.duration_ms} ms`}</td>
                      <td>{outcome(call)}</td>
                      <td className="snippet">
                        {call.last_call && "url" in call.last_call && call.last_call.url ? (
                          <div className="mono">{call.last_call.url}</div>
                        ) : null}
                        <pre>{snippet(call) || call.last_error || ""}</pre>
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </li>
          ))}
        </ol>
      </section>
      {confirmRotate && (
        <Confirm
          text="Rotate the webhook token? The current URL stops working at once; callers need the new one."
          action="Rotate token"
          onCancel={() => setConfirmRotate(false)}
          onConfirm={() => {
            setConfirmRotate(false);
            void act(async () => {
              const rotated = await api("post", "/api/jobs/{job_id}/webhook/rotate", { params });
              setWebhookUrl(rotated.webhook_url);
            }, "A new webhook token is issued; the old URL no longer works.");
          }}
        />
      )}
      {confirmDelete && (
        <Confirm
          text={`Delete ${job.name}? Its history goes with it.`}
          action="Delete"
          onCancel={() => setConfirmDelete(false)}
          onConfirm={() => {
            setConfirmDelete(false);
            api("delete", "/api/jobs/{job_id}", { params })
              .then(() => navigate("/"))
              .catch((failure: unknown) => setMessage(errorText(failure)));
          }}
        />
      )}
    </div>
  );
}
