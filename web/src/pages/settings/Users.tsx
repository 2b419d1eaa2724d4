import { useState } from "react";
import { api, type Schemas } from "../../api/client";
import { Confirm } from "../../components/Confirm";
import { Help } from "../../components/Help";
import { ListState, Outcome, ShownOnce, useAction, useLoad } from "../../components/Load";
import { RowButton, Table } from "../../components/Table";
import { SectionHead } from "../../components/SectionHead";
import { Denied } from "../../components/States";
import { localTime } from "../../format";
import { allows, useSession } from "../../session";

type User = Schemas["UserView"];
type Role = Schemas["RoleView"];
type Pending = { kind: "delete" | "disable" | "reset"; user: User };

/** Checkboxes for a set of roles (a multi-select that works by keyboard and screen reader). */
export function RolePicker(props: {
  legend: string;
  roles: Role[];
  value: string[];
  onChange: (ids: string[]) => void;
}) {
  return (
    <fieldset className="role-picker">
      <legend>{props.legend}</legend>
      {props.roles.map((role) => (
        <label key={role.id} className="choice">
          <input
            type="checkbox"
            checked={props.value.includes(role.id)}
            onChange={(e) =>
              props.onChange(
                e.target.checked
                  ? [...props.value, role.id]
                  : props.value.filter((id) => id !== role.id),
              )
            }
          />
          {role.name}
        </label>
      ))}
    </fieldset>
  );
}

const DANGER: Record<Pending["kind"], (email: string) => string> = {
  delete: (email) =>
    `Delete ${email}: the account and its sessions and API tokens go. Its audit entries stay. It cannot be undone; invite or create the user again instead.`,
  disable: (email) =>
    `Disable ${email}: they are signed out and cannot sign in or use their API tokens until someone with users:write enables them again.`,
  reset: (email) =>
    `Reset the password of ${email}: their old password stops working and they must choose a new one at their next sign-in. You get a temporary password to pass on.`,
};

export function UsersSection() {
  const { me } = useSession();
  const canWrite = allows(me, "users:write");
  const canInvite = allows(me, "invites:create");
  const users = useLoad(() => api("get", "/api/users"));
  const roles = useLoad(() => api("get", "/api/roles"));
  const invites = useLoad(
    () => (canInvite ? api("get", "/api/invites") : Promise.resolve([])),
    [canInvite],
  );
  const { outcome, run } = useAction(users.reload);
  const [email, setEmail] = useState("");
  const [roleIds, setRoleIds] = useState<string[]>([]);
  const [secret, setSecret] = useState<{ label: string; value: string } | null>(null);
  const [invite, setInvite] = useState<Schemas["InviteIssued"] | null>(null);
  const [editing, setEditing] = useState<{ id: string; roles: string[] } | null>(null);
  const [pending, setPending] = useState<Pending | null>(null);

  async function create(how: "create" | "invite") {
    setSecret(null);
    setInvite(null);
    const body = { email, role_ids: roleIds };
    const ok = await run(
      async () => {
        if (how === "create") {
          const made = await api("post", "/api/users", { body });
          setSecret({
            label: `Temporary password for ${made.user.email}`,
            value: made.temp_password,
          });
        } else {
          setInvite(await api("post", "/api/invites", { body }));
          await invites.reload();
        }
      },
      how === "create" ? `Created ${email}.` : `Invited ${email}.`,
    );
    if (ok) {
      setEmail("");
      setRoleIds([]);
    }
  }

  async function confirm(p: Pending) {
    setPending(null);
    const params = { user_id: p.user.id };
    if (p.kind === "delete") {
      await run(
        () => api("delete", "/api/users/{user_id}", { params }),
        `Deleted ${p.user.email}.`,
      );
    } else if (p.kind === "disable") {
      await run(
        () => api("patch", "/api/users/{user_id}", { params, body: { status: "disabled" } }),
        `Disabled ${p.user.email}.`,
      );
    } else {
      await run(async () => {
        const made = await api("post", "/api/users/{user_id}/reset-password", { params });
        setSecret({ label: `Temporary password for ${p.user.email}`, value: made.temp_password });
      }, `Reset the password of ${p.user.email}.`);
    }
  }

  const roleList = roles.data ?? [];
  return (
    <>
      <SectionHead title="Users">
        Everyone who can sign in. Users with users:read see this list; users:write creates,
        disables, resets and deletes; invites:create sends invites. A user gets the union of their
        roles&apos; permissions. Every change is in the audit log.
      </SectionHead>
      <Outcome text={outcome} />
      {secret && (
        <ShownOnce label={secret.label} value={secret.value} onDone={() => setSecret(null)} />
      )}
      {invite && (
        <div className="shown-once" role="status" aria-label="Invite link">
          <ShownOnce label={`Invite link for ${invite.invite.email}`} value={invite.link} />
          <p>
            {invite.email_sent
              ? "The invite was emailed too."
              : "No email was sent (SMTP is off or failed): send the link yourself."}
          </p>
        </div>
      )}
      {(canWrite || canInvite) && (
        <form
          className="stack card-inline"
          aria-label="New user"
          onSubmit={(e) => {
            e.preventDefault();
          }}
        >
          <h2>New user</h2>
          <label>
            Email
            <input type="email" value={email} onChange={(e) => setEmail(e.target.value)} required />
          </label>
          <RolePicker legend="Roles" roles={roleList} value={roleIds} onChange={setRoleIds} />
          <div className="row">
            {canWrite && (
              <button type="button" disabled={!email} onClick={() => void create("create")}>
                Create with a temporary password
              </button>
            )}
            {canInvite && (
              <button
                type="button"
                className="secondary"
                disabled={!email}
                onClick={() => void create("invite")}
              >
                Send an invite
              </button>
            )}
            <Help topic="creating or inviting">
              Create makes the account now with a temporary password shown once here; the user must
              change it at first sign-in. Invite makes a link (valid for a limited time) the user
              opens to choose their own password; it is emailed when SMTP is set up.
            </Help>
          </div>
        </form>
      )}
      {!canWrite && <Denied reason="Needs the users:write permission to change users." />}
      <ListState state={users} what="Users" empty="No users yet.">
        {(list) => (
          <Table
            label="Users"
            headers={["Email", "Status", "Roles", "Last sign-in", canWrite && "Actions"]}
          >
            {list.map((user) => (
              <tr key={user.id}>
                <td>
                  {user.email}
                  {user.must_change_password && <span className="badge">temporary password</span>}
                </td>
                <td>{user.status}</td>
                <td>
                  {editing?.id === user.id ? (
                    <div className="stack">
                      <RolePicker
                        legend={`Roles of ${user.email}`}
                        roles={roleList}
                        value={editing.roles}
                        onChange={(ids) => setEditing({ id: user.id, roles: ids })}
                      />
                      <div className="row">
                        <button
                          type="button"
                          className="small"
                          onClick={() =>
                            void run(
                              () =>
                                api("patch", "/api/users/{user_id}", {
                                  params: { user_id: user.id },
                                  body: { role_ids: editing.roles },
                                }),
                              `Saved the roles of ${user.email}.`,
                            ).then((ok) => ok && setEditing(null))
                          }
                        >
                          Save roles
                        </button>
                        <button
                          type="button"
                          className="small secondary"
                          onClick={() => setEditing(null)}
                        >
                          Cancel
                        </button>
                      </div>
                    </div>
                  ) : (
                    user.roles.map((r) => r.name).join(", ") || "—"
                  )}
                </td>
                <td>{localTime(user.last_login_at)}</td>
                {canWrite && (
                  <td>
                    {user.protected || user.id === me.id ? (
                      <span className="muted">
                        {user.protected ? "protected (bootstrap Super Admin)" : "you"}
                      </span>
                    ) : (
                      <div className="row">
                        <button
                          type="button"
                          className="small secondary"
                          aria-label={`Edit roles of ${user.email}`}
                          onClick={() =>
                            setEditing({ id: user.id, roles: user.roles.map((r) => r.id) })
                          }
                        >
                          Roles
                        </button>
                        {user.status === "disabled" ? (
                          <button
                            type="button"
                            className="small secondary"
                            aria-label={`Enable ${user.email}`}
                            onClick={() =>
                              void run(
                                () =>
                                  api("patch", "/api/users/{user_id}", {
                                    params: { user_id: user.id },
                                    body: { status: "active" },
                                  }),
                                `Enabled ${user.email}.`,
                              )
                            }
                          >
                            Enable
                          </button>
                        ) : (
                          <RowButton
                            label="Disable"
                            name={`Disable ${user.email}`}
                            kind="danger"
                            onClick={() => setPending({ kind: "disable", user })}
                          />
                        )}
                        <RowButton
                          label="Reset password"
                          name={`Reset password of ${user.email}`}
                          kind="danger"
                          onClick={() => setPending({ kind: "reset", user })}
                        />
                        <RowButton
                          label="Delete"
                          name={`Delete ${user.email}`}
                          kind="danger"
                          onClick={() => setPending({ kind: "delete", user })}
                        />
                      </div>
                    )}
                  </td>
                )}
              </tr>
            ))}
          </Table>
        )}
      </ListState>
      {canInvite && (
        <>
          <h2>Pending invites</h2>
          <ListState state={invites} what="Invites" empty="No invite is waiting.">
            {(list) => (
              <ul className="plain-list">
                {list.map((i) => (
                  <li key={i.id}>
                    {i.email} ({i.roles.map((r) => r.name).join(", ")}),{" "}
                    {i.expired ? "expired" : `expires ${localTime(i.expires_at)}`}{" "}
                    <button
                      type="button"
                      className="small secondary"
                      aria-label={`Resend the invite to ${i.email}`}
                      onClick={() =>
                        void run(async () => {
                          setInvite(
                            await api("post", "/api/invites/{user_id}/resend", {
                              params: { user_id: i.user_id },
                            }),
                          );
                          await invites.reload();
                        }, `Made a new invite link for ${i.email}.`)
                      }
                    >
                      Resend
                    </button>
                  </li>
                ))}
              </ul>
            )}
          </ListState>
        </>
      )}
      {pending && (
        <Confirm
          text={DANGER[pending.kind](pending.user.email)}
          action={{ delete: "Delete", disable: "Disable", reset: "Reset password" }[pending.kind]}
          onCancel={() => setPending(null)}
          onConfirm={() => void confirm(pending)}
        />
      )}
      <p className="muted">
        Temporary passwords and invite links are shown once; they are never stored readable.
      </p>
    </>
  );
}
