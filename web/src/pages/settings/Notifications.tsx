import { useEffect, useState } from "react";
import { api, type Schemas } from "../../api/client";
import { Help } from "../../components/Help";
import { ListState, Outcome, useAction, useLoad } from "../../components/Load";
import { RowButton, Table, usePendingConfirm } from "../../components/Table";
import { SectionHead } from "../../components/SectionHead";
import { Denied, Notice } from "../../components/States";
import { localTime } from "../../format";
import { allows, useSession } from "../../session";

type Target = Schemas["TargetView"];
type TargetWrite = Schemas["TargetWrite"];
type Event = NonNullable<TargetWrite["events"]>[number];
const EVENTS: Event[] = [
  "success",
  "failure",
  "retry_exhausted",
  "invocation_alarm",
  "loop_capped",
  "firing_skipped",
];
const DEFAULT_EVENTS: Event[] = ["success", "failure", "retry_exhausted", "invocation_alarm"];
const SERVICES = [
  "core",
  "ui",
  "worker",
  "mcp",
  "webhook",
  "script-worker-bash",
  "script-worker-node",
  "script-worker-python",
  "script-worker-groovy",
];
const ADDRESS_HINT: Record<TargetWrite["kind"], string> = {
  apprise: "An Apprise URL such as slack://… or json://host/path",
  email: "An email address (sent through the SMTP settings)",
  webhook: "An absolute http(s) URL that receives a signed JSON POST",
};
const BLANK: TargetWrite & { id: number | null } = {
  id: null,
  name: "",
  kind: "webhook",
  address: "",
  events: DEFAULT_EVENTS,
  signing_secret: "",
};

function TargetForm(props: {
  draft: typeof BLANK;
  stored: Target | null;
  onChange: (d: typeof BLANK) => void;
  onSave: () => void;
  onCancel: () => void;
}) {
  const d = props.draft;
  const events = d.events ?? [];
  return (
    <form
      className="stack card-inline"
      aria-label={d.id ? `Edit target ${d.name}` : "New target"}
      onSubmit={(e) => {
        e.preventDefault();
        props.onSave();
      }}
    >
      <h2>{d.id ? `Edit ${d.name}` : "New target"}</h2>
      <label>
        Target name
        <input
          value={d.name}
          onChange={(e) => props.onChange({ ...d, name: e.target.value })}
          required
        />
      </label>
      <label>
        Kind
        <select
          value={d.kind}
          onChange={(e) => props.onChange({ ...d, kind: e.target.value as TargetWrite["kind"] })}
        >
          <option value="webhook">webhook</option>
          <option value="apprise">apprise</option>
          <option value="email">email</option>
        </select>
      </label>
      <label>
        Address
        <input
          value={d.address ?? ""}
          placeholder={props.stored && d.kind === "apprise" ? "stored; leave empty to keep it" : ""}
          onChange={(e) => props.onChange({ ...d, address: e.target.value })}
          required={!props.stored || d.kind !== "apprise"}
        />
      </label>
      <p className="muted">{ADDRESS_HINT[d.kind]}</p>
      {d.kind === "webhook" && (
        <label>
          Signing secret
          <input
            type="password"
            autoComplete="new-password"
            value={d.signing_secret ?? ""}
            placeholder={
              props.stored?.has_signing_secret ? "stored; leave empty to keep it" : "optional"
            }
            onChange={(e) => props.onChange({ ...d, signing_secret: e.target.value })}
          />
        </label>
      )}
      <fieldset>
        <legend>Events</legend>
        {EVENTS.map((ev) => (
          <label key={ev} className="choice">
            <input
              type="checkbox"
              checked={events.includes(ev)}
              onChange={(e) =>
                props.onChange({
                  ...d,
                  events: e.target.checked ? [...events, ev] : events.filter((x) => x !== ev),
                })
              }
            />
            {ev}
          </label>
        ))}
      </fieldset>
      <div className="row">
        <button type="submit">{d.id ? "Save target" : "Create target"}</button>
        {d.id && (
          <button type="button" className="secondary" onClick={props.onCancel}>
            Cancel
          </button>
        )}
        <Help topic="the event filter">
          Tick the events this target hears about. None ticked means the first four. failure
          includes retry_exhausted; a recovery reaches targets with success or failure.
        </Help>
      </div>
    </form>
  );
}

function Apprise(props: { canWrite: boolean }) {
  const saved = useLoad(() => api("get", "/api/settings/apprise"));
  const { outcome, run } = useAction(saved.reload);
  const [draft, setDraft] = useState<Schemas["AppriseWrite"] | null>(null);
  useEffect(() => {
    if (saved.data) setDraft(saved.data);
  }, [saved.data]);
  if (saved.error) return <Notice kind="error" text={`Apprise settings: ${saved.error}`} />;
  if (!draft) return <Notice kind="loading" text="Loading Apprise settings…" />;
  return (
    <form
      className="stack card-inline"
      aria-label="Apprise server"
      onSubmit={(e) => {
        e.preventDefault();
        void run(
          () => api("put", "/api/settings/apprise", { body: draft }),
          "Apprise settings saved.",
        );
      }}
    >
      <h2>
        Apprise server
        <Help topic="the Apprise server">
          Off: Apprise targets are delivered by core itself. On: they go through an Apprise API
          server at this URL (ending in /notify). Turn it off to go back.
        </Help>
      </h2>
      <Outcome text={outcome} />
      <label className="choice">
        <input
          type="checkbox"
          checked={draft.enabled ?? false}
          disabled={!props.canWrite}
          onChange={(e) => setDraft({ ...draft, enabled: e.target.checked })}
        />
        Deliver through an Apprise API server
      </label>
      <label>
        Server URL
        <input
          value={draft.server_url ?? ""}
          disabled={!props.canWrite}
          placeholder="http://apprise:8000/notify"
          onChange={(e) => setDraft({ ...draft, server_url: e.target.value })}
        />
      </label>
      <label className="choice">
        <input
          type="checkbox"
          checked={draft.verify_tls ?? true}
          disabled={!props.canWrite}
          onChange={(e) => setDraft({ ...draft, verify_tls: e.target.checked })}
        />
        Verify TLS
      </label>
      {props.canWrite && (
        <div className="row">
          <button type="submit">Save Apprise settings</button>
          <button
            type="button"
            className="secondary"
            onClick={() =>
              void run(async () => {
                const probe = await api("post", "/api/settings/apprise/test", { body: draft });
                if (!probe.ok) throw new Error(probe.error ?? `HTTP ${probe.status_code}`);
              }, "The Apprise server answered.")
            }
          >
            Probe server
          </button>
        </div>
      )}
    </form>
  );
}

function Thresholds(props: { canWrite: boolean; targets: Target[] }) {
  const list = useLoad(() => api("get", "/api/notify/thresholds"));
  const { outcome, run } = useAction(list.reload);
  const [service, setService] = useState("core");
  const [cpu, setCpu] = useState("");
  const [memory, setMemory] = useState("");
  const [targetIds, setTargetIds] = useState<number[]>([]);
  const usable = props.targets.filter((t) => t.kind !== "webhook");
  return (
    <>
      <h2>
        Metrics alarms
        <Help topic="metrics alarms">
          Notify chosen Apprise or email targets when a service&apos;s newest sample goes above a
          CPU (percent of one core) or memory (resident MB) threshold, and again when it comes back.
          Checked every 60 seconds. Disable an alarm to silence it.
        </Help>
      </h2>
      <Outcome text={outcome} />
      <ListState state={list} what="Metrics alarms" empty="No metrics alarm set.">
        {(items) => (
          <Table
            label="Metrics alarms"
            headers={["Service", "CPU %", "Memory MB", "State", "Enabled"]}
          >
            {items.map((t) => (
              <tr key={t.service}>
                <td>{t.service}</td>
                <td>{t.cpu_percent ?? "—"}</td>
                <td>{t.memory_mb ?? "—"}</td>
                <td>
                  {t.last_state} {t.last_changed_at ? `since ${localTime(t.last_changed_at)}` : ""}
                </td>
                <td>
                  {props.canWrite ? (
                    <input
                      type="checkbox"
                      aria-label={`Alarm on ${t.service} enabled`}
                      checked={t.enabled}
                      onChange={(e) =>
                        void run(
                          () =>
                            api("put", "/api/notify/thresholds/{service_name}", {
                              params: { service_name: t.service },
                              body: {
                                enabled: e.target.checked,
                                cpu_percent: t.cpu_percent,
                                memory_mb: t.memory_mb,
                                target_ids: t.target_ids,
                              },
                            }),
                          `Alarm on ${t.service} ${e.target.checked ? "enabled" : "disabled"}.`,
                        )
                      }
                    />
                  ) : t.enabled ? (
                    "yes"
                  ) : (
                    "no"
                  )}
                </td>
              </tr>
            ))}
          </Table>
        )}
      </ListState>
      {props.canWrite && (
        <form
          className="stack card-inline"
          aria-label="Set a metrics alarm"
          onSubmit={(e) => {
            e.preventDefault();
            void run(
              () =>
                api("put", "/api/notify/thresholds/{service_name}", {
                  params: { service_name: service },
                  body: {
                    enabled: true,
                    cpu_percent: cpu === "" ? null : Number(cpu),
                    memory_mb: memory === "" ? null : Number(memory),
                    target_ids: targetIds,
                  },
                }),
              `Alarm on ${service} saved.`,
            );
          }}
        >
          <label>
            Service
            <select value={service} onChange={(e) => setService(e.target.value)}>
              {SERVICES.map((s) => (
                <option key={s}>{s}</option>
              ))}
            </select>
          </label>
          <label>
            CPU threshold (% of one core)
            <input
              type="number"
              min={0}
              step="any"
              value={cpu}
              onChange={(e) => setCpu(e.target.value)}
            />
          </label>
          <label>
            Memory threshold (MB resident)
            <input
              type="number"
              min={0}
              step="any"
              value={memory}
              onChange={(e) => setMemory(e.target.value)}
            />
          </label>
          <fieldset>
            <legend>Notify</legend>
            {usable.length === 0 && <p className="muted">No Apprise or email target yet.</p>}
            {usable.map((t) => (
              <label key={t.id} className="choice">
                <input
                  type="checkbox"
                  checked={targetIds.includes(t.id)}
                  onChange={(e) =>
                    setTargetIds(
                      e.target.checked ? [...targetIds, t.id] : targetIds.filter((x) => x !== t.id),
                    )
                  }
                />
                {t.name}
              </label>
            ))}
          </fieldset>
          <div className="row">
            <button type="submit">Save alarm</button>
          </div>
        </form>
      )}
    </>
  );
}

export function NotificationsSection() {
  const { me } = useSession();
  const canWrite = allows(me, "notify_settings:write");
  const targets = useLoad(() => api("get", "/api/notify/targets"));
  const { outcome, run } = useAction(targets.reload);
  const [draft, setDraft] = useState(BLANK);
  const confirm = usePendingConfirm<Target>(
    (t) =>
      `Delete the target ${t.name}: jobs and alarms that name it stop sending there. It cannot be undone; create it again and re-select it on those jobs.`,
    "Delete",
    (t) => {
      void run(
        () =>
          api("delete", "/api/notify/targets/{target_id}", {
            params: { target_id: String(t.id) },
          }),
        `Deleted the target ${t.name}.`,
      );
    },
  );
  const stored = targets.data?.find((t) => t.id === draft.id) ?? null;

  function save() {
    const { id, ...body } = draft;
    void run(
      () =>
        id
          ? api("put", "/api/notify/targets/{target_id}", {
              params: { target_id: String(id) },
              body,
            })
          : api("post", "/api/notify/targets", { body }),
      `Saved the target ${draft.name}.`,
    ).then((ok) => ok && setDraft(BLANK));
  }

  return (
    <>
      <SectionHead title="Notifications">
        Where notices go (targets: Apprise URLs, email addresses, your own webhooks), the optional
        Apprise server, and alarms on services&apos; CPU and memory. Jobs choose their targets in
        the job wizard. notify_settings:read shows this page, notify_settings:write changes it;
        changes are audited without secrets.
      </SectionHead>
      <Outcome text={outcome} />
      {!canWrite && <Denied reason="Needs the notify_settings:write permission to change these." />}
      <h2>Targets</h2>
      <ListState state={targets} what="Targets" empty="No notification target yet.">
        {(list) => (
          <Table
            label="Notification targets"
            headers={["Name", "Kind", "Address", "Events", canWrite && "Actions"]}
          >
            {list.map((t) => (
              <tr key={t.id}>
                <td>{t.name}</td>
                <td>
                  {t.kind}
                  {t.has_signing_secret && <span className="badge">signed</span>}
                </td>
                <td className="mono">{t.address}</td>
                <td>{t.events.join(", ")}</td>
                {canWrite && (
                  <td>
                    <div className="row">
                      <button
                        type="button"
                        className="small"
                        aria-label={`Send a test to ${t.name}`}
                        onClick={() =>
                          void run(
                            () =>
                              api("post", "/api/notify/targets/{target_id}/test", {
                                params: { target_id: String(t.id) },
                              }),
                            `The test notice reached ${t.name}.`,
                          )
                        }
                      >
                        Test
                      </button>
                      <button
                        type="button"
                        className="small secondary"
                        aria-label={`Edit ${t.name}`}
                        onClick={() =>
                          setDraft({
                            id: t.id,
                            name: t.name,
                            kind: t.kind as TargetWrite["kind"],
                            address: t.kind === "apprise" ? "" : t.address,
                            events: t.events as Event[],
                            signing_secret: "",
                          })
                        }
                      >
                        Edit
                      </button>
                      <RowButton
                        label="Delete"
                        name={`Delete ${t.name}`}
                        kind="danger"
                        onClick={() => confirm.ask(t)}
                      />
                    </div>
                  </td>
                )}
              </tr>
            ))}
          </Table>
        )}
      </ListState>
      {canWrite && (
        <TargetForm
          draft={draft}
          stored={stored}
          onChange={setDraft}
          onSave={save}
          onCancel={() => setDraft(BLANK)}
        />
      )}
      <Apprise canWrite={canWrite} />
      <Thresholds canWrite={canWrite} targets={targets.data ?? []} />
      {confirm.dialog}
    </>
  );
}
