from django.urls import path

from . import views

app_name = "attempts"
urlpatterns = [
    path("", views.task_list, name="tasks"),
    path("tasks/<slug:slug>/", views.task_detail, name="task"),
    path("attempts/<int:pk>/", views.attempt_detail, name="attempt"),
]
