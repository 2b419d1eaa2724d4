import { useEffect, useState } from "react";

// A tiny history router: the ui service answers every client route with index.html.
const listeners = new Set<() => void>();

export function navigate(to: string): void {
  window.history.pushState(null, "", to);
  listeners.forEach((listener) => listener());
}

export function useLocation(): URL {
  const [, setTick] = useState(0);
  useEffect(() => {
    const update = () => setTick((t) => t + 1);
    listeners.add(update);
    window.addEventListener("popstate", update);
    return () => {
      listeners.delete(update);
      window.removeEventListener("popstate", update);
    };
  }, []);
  return new URL(window.location.href);
}

export function Link(props: {
  to: string;
  children: React.ReactNode;
  className?: string;
  "aria-label"?: string;
}) {
  return (
    <a
      href={props.to}
      className={props.className}
      aria-label={props["aria-label"]}
      onClick={(event) => {
        if (event.metaKey || event.ctrlKey || event.shiftKey || event.button !== 0) return;
        event.preventDefault();
        navigate(props.to);
      }}
    >
      {props.children}
    </a>
  );
}

export type Route =
  | { page: "jobs" }
  | { page: "new" }
  | { page: "edit"; id: string }
  | { page: "job"; id: string }
  | { page: "import" }
  | { page: "queue" }
  | { page: "monitoring" }
  | { page: "settings"; section: string }
  | { page: "missing" };

export function matchRoute(pathname: string): Route {
  if (pathname === "/" || pathname === "/jobs") return { page: "jobs" };
  if (pathname === "/jobs/new") return { page: "new" };
  if (pathname === "/jobs/import") return { page: "import" };
  if (pathname === "/queue") return { page: "queue" };
  if (pathname === "/monitoring") return { page: "monitoring" };
  if (pathname === "/settings") return { page: "settings", section: "account" };
  const settings = /^\/settings\/([a-z]+)$/.exec(pathname);
  if (settings?.[1]) return { page: "settings", section: settings[1] };
  const edit = /^\/jobs\/([0-9a-f-]{36})\/edit$/.exec(pathname);
  if (edit?.[1]) return { page: "edit", id: edit[1] };
  const job = /^\/jobs\/([0-9a-f-]{36})$/.exec(pathname);
  if (job?.[1]) return { page: "job", id: job[1] };
  return { page: "missing" };
}
