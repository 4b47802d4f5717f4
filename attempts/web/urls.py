from django.contrib.auth import views as auth_views
from django.urls import path

from attempts.web import actions, health, hosts, signin, views
from attempts.web import evaluations as views_runs
from attempts.web import pools as views_pools
from attempts.web import scores as views_scores

app_name = "attempts"
urlpatterns = [
    path("", views.task_list, name="tasks"),
    path("login/", signin.login, name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("tasks/<slug:slug>/", views.task_detail, name="task"),
    path("tasks/<slug:slug>/attempts/", views.task_attempts_partial, name="task-attempts"),
    path("tasks/<slug:slug>/compare/", views.compare, name="compare"),
    path("tasks/<slug:slug>/scores/", views_scores.task_scores_partial, name="task-scores"),
    path("tasks/<slug:slug>/start/", actions.start_attempts, name="start"),
    path("tasks/<slug:slug>/export.jsonl", views.task_export, name="task-export"),
    path("attempts/<int:pk>/", views.attempt_detail, name="attempt"),
    path("attempts/<int:pk>/timeline/", views.attempt_timeline_partial, name="timeline"),
    path("attempts/<int:pk>/changes/<int:index>/", views.attempt_diff_file, name="diff-file"),
    path("attempts/<int:pk>/outputs/<str:name>", views.raw_output, name="raw-output"),
    path("attempts/<int:pk>/export.zip", views.attempt_export, name="attempt-export"),
    path("attempts/<int:pk>/cancel/", actions.cancel_attempt, name="cancel"),
    path("attempts/<int:pk>/rerun/", actions.rerun_attempt, name="rerun"),
    path("attempts/<int:pk>/recheck/", actions.recheck_attempt, name="recheck"),
    path("attempts/<int:pk>/delete/<str:level>/", actions.delete_attempt, name="attempt-delete"),
    path("leaderboard/", views_scores.leaderboard, name="leaderboard"),
    path("pools/", views_pools.pool_list, name="pools"),
    path("pools/<int:pk>/", views_pools.pool_detail, name="pool"),
    path("runs/", views_runs.run_list, name="runs"),
    path("runs/compare/", views_runs.runs_compare, name="runs-compare"),
    path("runs/<int:pk>/", views_runs.run_detail, name="run"),
    path("runs/<int:pk>/report.json", views_runs.run_report, name="run-report"),
    path("hosts/", hosts.host_list, name="hosts"),
    path("healthz", health.healthz, name="healthz"),
]
