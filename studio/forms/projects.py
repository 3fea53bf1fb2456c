from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model

from studio.forms.fields import check_plain_name
from studio.models import Membership, Project, Role


class ProjectForm(forms.ModelForm):
    class Meta:
        model = Project
        fields = ["name", "description"]
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("A project needs a name.")
        return check_plain_name(name, "the project's name")


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.RESEARCHER)

    def __init__(self, *args, project: Project, **kwargs):
        super().__init__(*args, **kwargs)
        self.project = project

    def clean_username(self):
        username = self.cleaned_data["username"].strip()
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            # accounts are the site's, not a project's: a project admin adds existing ones
            raise forms.ValidationError(
                f"No user is called {username!r}. Accounts are made by a site administrator: "
                "in /admin/ (Users, Add user) or with `python manage.py createsuperuser`; "
                "add them here once they exist."
            )
        self.cleaned_data["user"] = user
        return username

    def clean(self):
        data = super().clean() or {}
        user, role = data.get("user"), data.get("role")
        if user is not None and role and role != Role.ADMIN:
            admins = self.project.memberships.filter(role=Role.ADMIN)
            if admins.filter(user=user).exists() and admins.count() == 1:
                # A project without an admin could never get new members again.
                raise forms.ValidationError(
                    f"{user.username} is the only admin of {self.project.name}; "
                    "make someone else admin first."
                )
        return data

    def save(self) -> Membership:
        membership, _ = Membership.objects.update_or_create(
            project=self.project,
            user=self.cleaned_data["user"],
            defaults={"role": self.cleaned_data["role"]},
        )
        return membership
