from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.urls import include, path

from studio.views.health import healthz

urlpatterns = [
    path(
        "login/",
        login_not_required(auth_views.LoginView.as_view(template_name="auth/login.html")),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("", include("studio.views.projects")),
    path("", include("studio.views.library")),
    path("", include("studio.views.search")),
    path("", include("studio.views.trajectories")),
    path("", include("studio.views.trajectory_find")),
    path("", include("studio.views.step_text")),
    path("", include("studio.views.imports")),
    path("", include("studio.views.simulation")),
    path("", include("studio.views.branches")),
    path("", include("studio.views.endpoints")),
    path("", include("studio.views.perturbations")),
    path("", include("studio.views.worlds")),
    path("", include("studio.views.world_episodes")),
    path("", include("studio.views.playground")),
    path("", include("studio.views.gallery")),
    path("", include("studio.views.tokens")),
    path("", include("studio.views.evaluations")),
    path("", include("studio.views.annotations")),
    path("", include("studio.views.queues")),
    path("", include("studio.views.adjudication")),
    path("", include("studio.views.labels")),
    path("", include("studio.views.judging")),
    path("", include("studio.views.arena")),
    path("", include("studio.views.datasets")),
    path("", include("studio.views.campaigns")),
    path("", include("studio.views.finetunes")),
    path("", include("studio.views.finetune_evaluations")),
    path("", include("studio.views.behaviour")),
]
