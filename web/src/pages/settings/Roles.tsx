import { useState } from "react";
import { api, type Permission, type Schemas } from "../../api/client";
import { RowButton, usePendingConfirm } from "../../components/Table";
import { Help } from "../../components/Help";
import { ListState, Outcome, useAction, useLoad } from "../../components/Load";
import { SectionHead } from "../../components/SectionHead";
import { Denied } from "../../components/States";
import { allows, useSession } from "../../session";

type Role = Schemas["RoleView"];

/** The permission checkboxes of one role, grouped by what they cover (`jobs`, `users`, …). */
function PermissionGrid(props: {
  role: Role;
  all: Permission[];
  disabled: boolean;
  onSave: (permissions: Permission[]) => void;
}) {
  const [chosen, setChosen] = useState<Permission[]>(props.role.permissions);
  const areas = [...new Set(props.all.map((p) => p.split(":")[0] ?? p))];
  const superAdmin = props.role.system_key === "super_admin";
  return (
    <form
      aria-label={`Permissions of ${props.role.name}`}
      onSubmit={(e) => {
        e.preventDefault();
        props.onSave(chosen);
      }}
    >
      {superAdmin && (
        <p className="muted">Super Admin stores no permission: its holders pass every check.</p>
      )}
      <div className="permission-grid">
        {areas.map((area) => (
          <fieldset key={area}>
            <legend>{area}</legend>
            {props.all
              .filter((p) => p.startsWith(`${area}:`))
              .map((p) => (
                <label key={p} className="choice">
                  <input
                    type="checkbox"
                    checked={chosen.includes(p)}
                    disabled={props.disabled || superAdmin}
                    onChange={(e) =>
                      setChosen(e.target.checked ? [...chosen, p] : chosen.filter((x) => x !== p))
                    }
                  />
                  {p}
                </label>
              ))}
          </fieldset>
        ))}
      </div>
      {!props.disabled && !superAdmin && (
        <button type="submit">Save permissions of {props.role.name}</button>
      )}
    </form>
  );
}

export function RolesSection() {
  const { me, refresh } = useSession();
  const canWrite = allows(me, "roles:write");
  const roles = useLoad(() => api("get", "/api/roles"));
  const permissions = useLoad(() => api("get", "/api/roles/permissions"));
  const { outcome, run } = useAction(roles.reload);
  const [openId, setOpenId] = useState<string | null>(null);
  const [name, setName] = useState("");
  const [description, setDescription] = useState("");
  const confirm = usePendingConfirm<Role>(
    (role) =>
      `Delete the role ${role.name}. It is refused while a user or token still holds it. It cannot be undone; create the role again instead.`,
    "Delete role",
    (role) => {
      void run(
        () => api("delete", "/api/roles/{role_id}", { params: { role_id: role.id } }),
        `Deleted the role ${role.name}.`,
      );
    },
  );

  const open = roles.data?.find((r) => r.id === openId) ?? null;
  return (
    <>
      <SectionHead title="Roles">
        A role is a named set of permissions; a user holds the union of their roles&apos;.
        roles:read shows this page, roles:write changes it. You can only add permissions you hold
        yourself. A change applies at each user&apos;s and token&apos;s next request, and is
        audited.
      </SectionHead>
      <Outcome text={outcome} />
      {!canWrite && <Denied reason="Needs the roles:write permission to change roles." />}
      <ListState state={roles} what="Roles" empty="No roles.">
        {(list) => (
          <ul className="plain-list">
            {list.map((role) => (
              <li key={role.id}>
                <button
                  type="button"
                  className="link"
                  aria-expanded={role.id === openId}
                  onClick={() => setOpenId(role.id === openId ? null : role.id)}
                >
                  {role.name}
                </button>{" "}
                <span className="muted">
                  {role.is_system ? "built in, " : ""}
                  {role.permissions.length} permissions
                  {role.description ? `: ${role.description}` : ""}
                </span>
                {canWrite && !role.is_system && (
                  <RowButton
                    label="Delete"
                    name={`Delete role ${role.name}`}
                    kind="danger"
                    onClick={() => confirm.ask(role)}
                  />
                )}
              </li>
            ))}
          </ul>
        )}
      </ListState>
      {open && permissions.data && (
        <PermissionGrid
          key={`${open.id}-${open.permissions.join()}`}
          role={open}
          all={permissions.data}
          disabled={!canWrite}
          onSave={(chosen) =>
            void run(
              () =>
                api("patch", "/api/roles/{role_id}", {
                  params: { role_id: open.id },
                  body: { permissions: chosen },
                }),
              `Saved the permissions of ${open.name}.`,
            ).then(() => refresh())
          }
        />
      )}
      {canWrite && (
        <form
          className="stack card-inline"
          aria-label="New role"
          onSubmit={(e) => {
            e.preventDefault();
            void run(
              () => api("post", "/api/roles", { body: { name, description, permissions: [] } }),
              `Created the role ${name}; open it to choose its permissions.`,
            ).then((ok) => {
              if (ok) {
                setName("");
                setDescription("");
              }
            });
          }}
        >
          <h2>New role</h2>
          <label>
            Role name
            <input value={name} onChange={(e) => setName(e.target.value)} required />
          </label>
          <label>
            Description
            <input value={description} onChange={(e) => setDescription(e.target.value)} />
          </label>
          <div className="row">
            <button type="submit">Create role</button>
          </div>
        </form>
      )}
      {confirm.dialog}
      <Help topic="the permission grid">
        Tick a permission and save to grant it to everyone holding this role. Untick to take it
        away; their screens lose the matching controls at their next page load. Built-in roles
        cannot be renamed or deleted, and Super Admin cannot be edited.
      </Help>
    </>
  );
}
