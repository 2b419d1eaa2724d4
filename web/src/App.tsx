import { useCallback, useEffect, useState } from "react";
import { api, ApiError, setSessionHandlers, type Account } from "./api/client";
import { PasswordChange } from "./pages/PasswordChange";
import { JobsList } from "./pages/JobsList";
import { JobWizard } from "./pages/JobWizard";
import { JobDetail } from "./pages/JobDetail";
import { ImportJobs } from "./pages/ImportJobs";
import { QueueInspector } from "./pages/QueueInspector";
import { Monitoring } from "./pages/Monitoring";
import { Settings } from "./pages/Settings";
import { Link, matchRoute, useLocation } from "./router";
import { allows, SessionContext } from "./session";
import { Notice } from "./components/States";

export function App() {
  const [me, setMe] = useState<Account | null>(null);
  const [failure, setFailure] = useState<string | null>(null);
  const location = useLocation();

  const refresh = useCallback(async () => {
    try {
      setMe(await api("get", "/api/account/me"));
      setFailure(null);
    } catch (error) {
      setFailure(error instanceof ApiError ? error.message : "Zilean could not be reached.");
    }
  }, []);

  useEffect(() => {
    setSessionHandlers({
      passwordChangeRequired: () =>
        setMe((current) => (current ? { ...current, must_change_password: true } : current)),
    });
    void refresh();
  }, [refresh]);

  if (failure) return <Notice kind="error" text={failure} />;
  if (!me) return <Notice kind="loading" text="Loading…" />;
  const session = { me, refresh };
  if (me.must_change_password) {
    return (
      <SessionContext.Provider value={session}>
        <PasswordChange />
      </SessionContext.Provider>
    );
  }
  const route = matchRoute(location.pathname);
  return (
    <SessionContext.Provider value={session}>
      <header className="topbar">
        <Link to="/" className="brand">
          Zilean
        </Link>
        <nav aria-label="Main">
          <Link to="/">Jobs</Link>
          <Link to="/jobs/import">Import</Link>
          {allows(me, "jobs:write") && <Link to="/queue">Queue</Link>}
          {allows(me, "metrics:read") && <Link to="/monitoring">Monitoring</Link>}
          <Link to="/settings">Settings</Link>
          <a href="/account">Account</a>
        </nav>
        <span className="who">{me.email}</span>
      </header>
      <main className="content">
        {route.page === "jobs" && <JobsList />}
        {route.page === "new" && <JobWizard key="new" />}
        {route.page === "edit" && <JobWizard key={route.id} jobId={route.id} />}
        {route.page === "job" && <JobDetail key={route.id} jobId={route.id} />}
        {route.page === "import" && <ImportJobs />}
        {route.page === "queue" && <QueueInspector />}
        {route.page === "monitoring" && <Monitoring />}
        {route.page === "settings" && <Settings section={route.section} />}
        {route.page === "missing" && (
          <Notice kind="empty" text="There is no page at this address." />
        )}
      </main>
    </SessionContext.Provider>
  );
}
