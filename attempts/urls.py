from django.urls import path

from . import views

app_name = "attempts"
urlpatterns = [
    path("", views.task_list, name="tasks"),
    path("tasks/<slug:slug>/", views.task_detail, name="task"),
    path("tasks/<slug:slug>/export.jsonl", views.task_export, name="task-export"),
    path("attempts/<int:pk>/", views.attempt_detail, name="attempt"),
    path("attempts/<int:pk>/export.zip", views.attempt_export, name="attempt-export"),
    path("attempts/<int:pk>/delete/<str:level>/", views.attempt_delete_view, name="attempt-delete"),
]
